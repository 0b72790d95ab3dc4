package cachedir

import (
	"errors"
	"sync"
)

// Persister writes namespaces' records to a Dir off the apply path. Submit
// hands it a record and returns at once; one goroutine writes them, one at a
// time. Records of a namespace that arrive while an earlier one waits are
// coalesced: only the newest submitted is written, so a burst of changes
// costs one or two writes, not one each. Records of different namespaces
// are all written, in no particular order.
//
// A write that fails is reported to onResult and not retried: the next
// submission of that namespace writes again, and the previous file stays as
// it was. A record refused because the file holds a newer one (a
// *SupersededError, from another process sharing the directory) is reported
// to onResult too, but is not a failure: the file holds better data.
//
// A record with NewHistory set that is coalesced away by a later one of the
// same store id passes the flag on to it, so that the new history is
// written even if the record that set it never was.
type Persister struct {
	d        *Dir
	onResult func(*Record, error)

	wake chan struct{} // cap 1: work is pending
	halt chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu        sync.Mutex
	pending   map[string]pending // newest unwritten record per namespace
	submitted uint64             // sequence number of the last Submit
	done      uint64             // every Submit up to this one is written, failed or superseded
	doneCh    chan struct{}      // closed (and replaced) when done advances
	closed    bool

	failed map[string]error // namespaces whose newest write failed (not superseded); writer goroutine only

	closeOnce sync.Once
	closeErr  error
}

// pending is a record waiting to be written, and whether it is to be
// written as new history (its own NewHistory, or one it coalesced away).
type pending struct {
	rec        *Record
	newHistory bool
}

// NewPersister starts a Persister writing to d. onResult, if not nil, is
// called on the Persister's goroutine after each write with the record and
// the error of Save (nil on success); it must not call Flush or Close.
// Call Close to flush and stop the goroutine.
func NewPersister(d *Dir, onResult func(rec *Record, err error)) *Persister {
	if onResult == nil {
		onResult = func(*Record, error) {}
	}
	p := &Persister{
		d:        d,
		onResult: onResult,
		wake:     make(chan struct{}, 1),
		halt:     make(chan struct{}),
		pending:  make(map[string]pending),
		doneCh:   make(chan struct{}),
		failed:   make(map[string]error),
	}
	p.wg.Add(1)
	go p.run()
	return p
}

// Submit queues rec to be written, replacing any unwritten record of the
// same namespace. It never blocks. The caller must not modify rec
// afterwards. After Close, Submit drops rec.
func (p *Persister) Submit(rec *Record) {
	if rec == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.submitted++
	next := pending{rec: rec, newHistory: rec.NewHistory}
	if prev, ok := p.pending[rec.Namespace]; ok && prev.newHistory && prev.rec.StoreID == rec.StoreID {
		next.newHistory = true
	}
	p.pending[rec.Namespace] = next
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // already woken
	}
}

// Close writes what is pending and stops the goroutine. It returns an error
// when, for some namespace, the newest record submitted is not on disk
// because its write failed (each failure was also reported to onResult); not
// when it was superseded by a newer record on disk.
// Later Submits are dropped. Close is idempotent: later calls wait for the
// first and return its result.
func (p *Persister) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.halt)
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Persister) run() {
	defer p.wg.Done()
	for {
		select {
		case <-p.wake:
			p.writePending()
		case <-p.halt:
			// Submit no longer adds (closed is set before halt is
			// closed), so one pass writes the rest.
			p.writePending()
			errs := make([]error, 0, len(p.failed))
			for _, err := range p.failed {
				errs = append(errs, err)
			}
			p.closeErr = errors.Join(errs...)
			return
		}
	}
}

// writePending writes the records pending now, then marks every submission
// up to that moment done: each was in this batch, or superseded by one in
// it, or written before.
func (p *Persister) writePending() {
	p.mu.Lock()
	batch, upTo := p.pending, p.submitted
	if len(batch) > 0 {
		p.pending = make(map[string]pending)
	}
	p.mu.Unlock()

	for ns, pr := range batch {
		rec := pr.rec
		if pr.newHistory && !rec.NewHistory {
			r := *rec // the caller's record is not ours to modify
			r.NewHistory = true
			rec = &r
		}
		err := p.d.Save(rec)
		if err != nil && !errors.Is(err, ErrSuperseded) {
			p.failed[ns] = err
		} else {
			delete(p.failed, ns)
		}
		p.onResult(pr.rec, err)
	}

	var wake chan struct{}
	p.mu.Lock()
	if upTo > p.done {
		p.done = upTo
		wake, p.doneCh = p.doneCh, make(chan struct{})
	}
	p.mu.Unlock()
	if wake != nil {
		close(wake) // outside the lock (STYLE.md 4)
	}
}
