package control

import (
	"context"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast-dev/holdfast/internal/rollout/controller"
)

// activeRollouts follows, over one etcd watch, which namespaces have a
// rollout running, so that a server with none costs etcd no request for
// them: the controller's steps and the report summaries look only while
// one runs. A hint: every transition is still conditional on the state
// read from the store.
type activeRollouts struct {
	cli  *clientv3.Client
	log  *slog.Logger
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	running map[string]*controller.State // ns → its running rollout, as last written
	known   bool                         // the first read is done
}

func newActiveRollouts(cli *clientv3.Client, log *slog.Logger) *activeRollouts {
	ctx, cancel := context.WithCancel(context.Background())
	a := &activeRollouts{cli: cli, log: log, stop: cancel, running: make(map[string]*controller.State)}
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.run(ctx) }()
	return a
}

func (a *activeRollouts) close() {
	a.stop()
	a.wg.Wait()
}

// any reports whether a rollout may be running (true until the first
// read is done).
func (a *activeRollouts) any() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.known || len(a.running) > 0
}

// namespaces returns the namespaces with a running rollout.
func (a *activeRollouts) namespaces() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.running))
	for ns := range a.running {
		out = append(out, ns)
	}
	return out
}

// states returns the running rollouts' states, as last written (a
// hint, as above: shared, not to be modified).
func (a *activeRollouts) states() []*controller.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*controller.State, 0, len(a.running))
	for _, st := range a.running {
		out = append(out, st)
	}
	return out
}

// set records ns's state (nil, or not running: none runs).
func (a *activeRollouts) set(ns string, st *controller.State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st != nil && st.State == controller.Running {
		a.running[ns] = st
	} else {
		delete(a.running, ns)
	}
}

func (a *activeRollouts) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := a.follow(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("control: following the running rollouts", "err", err)
			a.mu.Lock()
			a.known = false
			a.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (a *activeRollouts) follow(ctx context.Context) error {
	prefix := RolloutRoot + "current/"
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := a.cli.Get(rctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	running := make(map[string]*controller.State)
	for _, kv := range resp.Kvs {
		if st, err := decodeState(kv.Value, kv.ModRevision); err == nil && st.State == controller.Running {
			running[st.Namespace] = st
		}
	}
	a.mu.Lock()
	a.running, a.known = running, true
	a.mu.Unlock()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	for wr := range a.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			ns := string(ev.Kv.Key[len(prefix):])
			if ev.Type == clientv3.EventTypeDelete {
				a.set(ns, nil)
				continue
			}
			st, err := decodeState(ev.Kv.Value, ev.Kv.ModRevision)
			if err != nil {
				st = nil
			}
			a.set(ns, st)
		}
	}
	return ctx.Err()
}
