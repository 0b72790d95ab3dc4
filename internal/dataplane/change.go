package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/holdfast-dev/holdfast/transport"
)

// What a Backend hands the data plane: its changes, consistent reads of a
// namespace, and subscriptions.

// Change is one committed change set. It is immutable once committed; its
// SSE frame is encoded once and shared by every watcher.
type Change struct {
	Gen  uint64 // the backend's generation (Backend.Generation)
	Seq  uint64 // a Follower's sequence number; 0 from an origin's store
	CS   transport.ChangeSet
	once sync.Once
	enc  []byte
	data []byte // the ChangeSet's JSON: inside enc, its one data line
	// base is the change as a client that predates rollouts sees it,
	// without reserved keys: c itself when it touches none. Built on first
	// use (see baseView), shared by every such client.
	baseOnce sync.Once
	base     *Change
}

// encode encodes the change once, for every stream and long-poll.
func (c *Change) encode() {
	c.once.Do(func() {
		data := []byte(c.CS.Raw) // a relay's: its upstream's bytes, unknown fields and all
		if data == nil {
			var err error
			if data, err = json.Marshal(&c.CS); err != nil { // cannot happen: every value is valid, compact JSON
				panic(fmt.Sprintf("dataplane: encode change set: %v", err))
			}
		}
		c.enc = appendFrame(nil, transport.EventChange, c.CS.Revision, data)
		// json.Marshal escapes newlines, so the frame has one data line
		// that is data itself: share it rather than keep a copy.
		if i := bytes.Index(c.enc, []byte("\ndata: ")); i >= 0 && !bytes.ContainsRune(data, '\n') {
			start := i + len("\ndata: ")
			c.data = c.enc[start : start+len(data) : start+len(data)]
		} else {
			c.data = data
		}
	})
}

// frame returns the change's SSE frame, encoding it on first use.
func (c *Change) frame() []byte {
	c.encode()
	return c.enc
}

// json returns the change's ChangeSet JSON, encoding it on first use.
func (c *Change) json() []byte {
	c.encode()
	return c.data
}

// Snapshot is a consistent read of one namespace.
type Snapshot struct {
	StoreID string
	Rev     int64
	Cursor  int64
	Compact int64
	Values  map[string]json.RawMessage // shared, never mutate
}

// Subscription is what a reader of changes learns, atomically, when it
// starts: the change sets after its cursor and the state they lead to.
type Subscription struct {
	StoreID string
	Gen     uint64
	Head    int64 // cursor up to which backlog is complete
	NsRev   int64
	Backlog []*Change
	// Seq and HeadSeq: a Follower's sequence numbers at the subscription
	// (see watcher.seq); 0 from the store.
	Seq, HeadSeq uint64
}

// SinceReq is one namespace of a multi-namespace subscription.
type SinceReq struct {
	Name  string
	Since int64
}

// Size is the length of the change set's JSON, encoding it on first use:
// what a backend's window of changes weighs.
func (c *Change) Size() int {
	c.encode()
	return len(c.data)
}

// Frame returns the change's SSE frame, as every watcher gets it.
func (c *Change) Frame() []byte { return c.frame() }
