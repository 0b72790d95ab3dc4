package cachedir

import "context"

// Helpers for this package's tests, which no library code needs.

// Flush waits until every record submitted before the call has been written
// (or its write has failed, or a newer record of its namespace has been), or
// until ctx ends, returning ctx's error then. Write errors go to onResult,
// not to Flush.
func (p *Persister) Flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.submitted
	for p.done < target {
		ch := p.doneCh
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return nil
}
