package dataplane

// The ack decoder as it was before package jsonscan: its own white-space
// reader, and package snapshot's SkipValue (called here as
// jsonscan.SkipValue: the same code, moved). The baseline of
// BenchmarkAckDecoderVsBaseline, which measures both in one run.
// Generated from ackdecode.go as it was then, by renaming its identifiers
// with a "base" prefix; only the benchmark uses it.

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
	"github.com/holdfast-dev/holdfast/transport"
)

// baseAckDecoder decodes ack bodies (one transport.Ack, or a
// wire.AckBatch) as json.Unmarshal into an ackBody does, for the
// shape clients send, at a fraction of its cost: the server decodes one
// body per client per publish. What it does not read itself it leaves to
// encoding/json (decode). A stream's decoder (intern) keeps the strings
// it made, so that its client's id and namespaces are allocated once per
// stream rather than once per ack; and (reuse) decodes every batch into
// one slice, valid until the next body.
type baseAckDecoder struct {
	intern bool
	names  map[string]string // intern: strings made, each its own key
	reuse  bool
	acks   []transport.Ack // reuse: the last batch's
	// other: the last decode met a key that is not exactly a field's
	// name (one this version does not know, or a known one in another
	// case), which a relay keeps (transport.Ack.Extra): the body is then
	// parseRelayedAckBody's.
	other bool
}

// baseMaxInterned bounds the strings a stream's decoder keeps: a client has
// one id and a few namespaces; a stream that names more allocates the
// rest as they come.
const baseMaxInterned = 128

// parse is parseAckBody, decoding with d.
func (d *baseAckDecoder) parse(data []byte, ownIDs, relay bool) (acks []transport.Ack, batch bool, err error) {
	var body ackBody
	if relay {
		// A relay reads the common body (no field it must keep) as the
		// origin does, and leaves the rest to parseRelayedAckBody.
		if !d.decode(data, &body) || d.other {
			return parseRelayedAckBody(data, ownIDs)
		}
		return checkAckBody(body, ownIDs, true)
	}
	if !d.decode(data, &body) {
		// A body of its own, fresh (encoding/json would merge into what
		// decode left), so that body stays on the stack.
		fallback := new(ackBody)
		if err := unmarshal(data, fallback); err != nil {
			return nil, false, err
		}
		body = *fallback
	}
	return checkAckBody(body, ownIDs, false)
}

// decode reads data into *body exactly as json.Unmarshal would, or
// reports false to leave data to encoding/json: when data is not JSON or
// does not fit an ackBody (json.Unmarshal's error says why), and when it
// holds what decode does not read: an escape or a byte that is not UTF-8
// in a string it keeps, a key with an escape or a byte that is not ASCII
// (it might match a field case-insensitively, as "ſtatus" does), a second
// "acks" (encoding/json decodes it into the first one's elements).
func (d *baseAckDecoder) decode(data []byte, body *ackBody) bool {
	// s aliases data, which may be reused once the body is decoded: what
	// is kept is copied (str).
	s := unsafe.String(unsafe.SliceData(data), len(data))
	d.other = false
	i, ok := d.body(s, baseSkipWS(s, 0), body)
	return ok && baseSkipWS(s, i) == len(s)
}

// body reads the object at s[i] into *b and returns the index just past
// it. (It and ack are two functions rather than one that calls itself
// through array so that array's buffer stays on the stack.)
func (d *baseAckDecoder) body(s string, i int, b *ackBody) (int, bool) {
	i, more, ok := baseOpenObject(s, i)
	seenAcks := false
	for more && ok {
		var key string
		start := i
		if key, i, ok = baseMember(s, i); !ok {
			break
		}
		d.noteKey(s, start, key)
		if key == "acks" {
			if seenAcks {
				return 0, false
			}
			seenAcks = true
			i, ok = d.array(s, i, &b.Acks)
		} else {
			i, ok = d.field(s, i, key, &b.Ack, 1)
		}
		if ok {
			i, more, ok = baseNextMember(s, i)
		}
	}
	return i, ok
}

// ack reads the object at s[i], an element of "acks", into *a and
// returns the index just past it.
func (d *baseAckDecoder) ack(s string, i int, a *transport.Ack) (int, bool) {
	i, more, ok := baseOpenObject(s, i)
	for more && ok {
		var key string
		start := i
		if key, i, ok = baseMember(s, i); ok {
			d.noteKey(s, start, key)
			if i, ok = d.field(s, i, key, a, 3); ok {
				i, more, ok = baseNextMember(s, i)
			}
		}
	}
	return i, ok
}

// noteKey sets d.other unless the key at s[start] is exactly key, the
// field baseMember found it to name (a key in another case names one too).
func (d *baseAckDecoder) noteKey(s string, start int, key string) {
	if !strings.HasPrefix(s[start+1:], key+`"`) {
		d.other = true
	}
}

// field reads the value at s[i] of the baseMember key into its field of *a,
// or skips it: a field this version does not know. depth is how many
// arrays and objects enclose the value.
func (d *baseAckDecoder) field(s string, i int, key string, a *transport.Ack, depth int) (int, bool) {
	switch key {
	case "client_id":
		return d.str(s, i, &a.ClientID, true)
	case "ns":
		return d.str(s, i, &a.Namespace, true)
	case "status":
		return d.str(s, i, &a.Status, true)
	case "error":
		return d.str(s, i, &a.Error, false)
	case "rollout":
		return d.str(s, i, &a.Rollout, true)
	case "revision":
		return baseReadInt(s, i, &a.Revision)
	}
	d.other = true
	i, err := jsonscan.SkipValue(s, i, depth)
	return i, err == nil
}

// baseOpenObject reads the '{' at s[i] and the white space after it; more
// says whether a baseMember follows (or the object ends at once, '}' read).
func baseOpenObject(s string, i int) (next int, more, ok bool) {
	if i >= len(s) || s[i] != '{' {
		return 0, false, false
	}
	if i = baseSkipWS(s, i+1); i < len(s) && s[i] == '}' {
		return i + 1, false, true
	}
	return i, true, true
}

// baseMember reads a baseMember's key at s[i] and its colon, and returns the
// field the key names (baseFieldName) and the index of the value.
func baseMember(s string, i int) (key string, value int, ok bool) {
	key, i, ok = baseFieldName(s, i)
	if !ok {
		return "", 0, false
	}
	if i = baseSkipWS(s, i); i >= len(s) || s[i] != ':' {
		return "", 0, false
	}
	return key, baseSkipWS(s, i+1), true
}

// baseNextMember reads what follows a baseMember's value at s[i]: a ',' and the
// white space after it (more), or the '}' that ends the object.
func baseNextMember(s string, i int) (next int, more, ok bool) {
	switch i = baseSkipWS(s, i); {
	case i < len(s) && s[i] == ',':
		return baseSkipWS(s, i+1), true, true
	case i < len(s) && s[i] == '}':
		return i + 1, false, true
	}
	return 0, false, false
}

// array reads the "acks" at s[i] into *acks: null, or an array of ack
// objects (a null element is a zero Ack, as encoding/json makes it).
func (d *baseAckDecoder) array(s string, i int, acks *[]transport.Ack) (int, bool) {
	if strings.HasPrefix(s[i:], "null") {
		*acks = nil
		return i + 4, true
	}
	if i >= len(s) || s[i] != '[' {
		return 0, false
	}
	if i = baseSkipWS(s, i+1); i < len(s) && s[i] == ']' {
		*acks = []transport.Ack{} // empty, not nil: a batch
		return i + 1, true
	}
	if d.reuse {
		var ok bool
		i, d.acks, ok = d.elements(s, i, d.acks[:0])
		*acks = d.acks
		if cap(d.acks) > baseMaxReused {
			d.acks = nil // a stream keeps no big batch's room
		}
		return i, ok
	}
	var buf [16]transport.Ack // a batch that fits allocates only its copy
	i, out, ok := d.elements(s, i, buf[:0])
	*acks = append(make([]transport.Ack, 0, len(out)), out...)
	return i, ok
}

// baseMaxReused bounds the acks a stream's decoder keeps room for.
const baseMaxReused = 64

// elements reads the elements of an array of acks from s[i], past its
// '[', appending them to out, and returns the index past the array.
func (d *baseAckDecoder) elements(s string, i int, out []transport.Ack) (int, []transport.Ack, bool) {
	for {
		var a transport.Ack
		var ok bool
		if strings.HasPrefix(s[i:], "null") {
			i += 4
		} else if i, ok = d.ack(s, i, &a); !ok {
			return 0, out, false
		}
		out = append(out, a)
		switch i = baseSkipWS(s, i); {
		case i < len(s) && s[i] == ',':
			i = baseSkipWS(s, i+1)
		case i < len(s) && s[i] == ']':
			return i + 1, out, true
		default:
			return 0, out, false
		}
	}
}

// str reads the JSON string or null at s[i] into *v (null leaves *v as
// it is, as encoding/json does), a copy, interned (keep) unless it is an
// error's text. It takes only a string whose text is its content: no
// escapes, valid UTF-8.
func (d *baseAckDecoder) str(s string, i int, v *string, intern bool) (int, bool) {
	if strings.HasPrefix(s[i:], "null") {
		return i + 4, true
	}
	if i >= len(s) || s[i] != '"' {
		return 0, false
	}
	ascii := true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			text := s[i+1 : j]
			if !ascii && !utf8.ValidString(text) {
				return 0, false
			}
			if intern {
				*v = d.keep(text)
			} else {
				*v = strings.Clone(text)
			}
			return j + 1, true
		case c == '\\' || c < 0x20:
			return 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false
}

// keep returns a copy of v, which aliases a body: the known statuses and
// a stream's strings seen before without allocating.
func (d *baseAckDecoder) keep(v string) string {
	switch v {
	case "":
		return ""
	case transport.AckApplied:
		return transport.AckApplied
	case transport.AckRejected:
		return transport.AckRejected
	case transport.AckWouldReject:
		return transport.AckWouldReject
	}
	if k, ok := d.names[v]; ok {
		return k
	}
	k := strings.Clone(v)
	if d.intern && len(d.names) < baseMaxInterned && len(k) <= transport.MaxClientIDBytes {
		if d.names == nil {
			d.names = make(map[string]string)
		}
		d.names[k] = k
	}
	return k
}

// baseFieldName reads the key at s[i] and returns the field it names (the
// key itself when it names none), and the index just past it. A key with
// upper-case letters names the field it equals case-insensitively, as in
// encoding/json; one with an escape or a byte that is not ASCII is left
// to encoding/json.
func baseFieldName(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	upper := false
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			key := s[i+1 : j]
			if upper {
				for _, f := range [...]string{"client_id", "ns", "revision", "status", "error", "rollout", "acks"} {
					if strings.EqualFold(key, f) {
						return f, j + 1, true
					}
				}
			}
			return key, j + 1, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return "", 0, false
		case 'A' <= c && c <= 'Z':
			upper = true
		}
	}
	return "", 0, false
}

// baseReadInt reads the JSON number or null at s[i] into *v as encoding/json
// reads one into an int64; a fraction, an exponent or a value out of
// range is its error, left to it.
func baseReadInt(s string, i int, v *int64) (int, bool) {
	if strings.HasPrefix(s[i:], "null") {
		return i + 4, true
	}
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		u = u*10 + uint64(s[i]-'0')
	}
	switch n := i - start; {
	case n == 0 || n > 1 && s[start] == '0': // not JSON
		return 0, false
	case n > 19: // u may have wrapped
		return 0, false
	case i < len(s) && (s[i] == '.' || s[i] == 'e' || s[i] == 'E'):
		return 0, false
	case neg && u > 1<<63:
		return 0, false
	case neg:
		*v = -int64(u) // 1<<63 wraps to math.MinInt64, as it should
	case u > 1<<63-1:
		return 0, false
	default:
		*v = int64(u)
	}
	return i, true
}

// baseSkipWS returns the index of the first byte at or after i that is not
// JSON white space.
func baseSkipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// BenchmarkAckDecoderVsBaseline alternates blocks of decodes by the ack
// decoder and by its baseline (as it was before it shared package
// jsonscan), block after block, so that both see the same machine load,
// for the bodies and modes of BenchmarkAckParse (decoder: a fresh one per
// body, as POST /sdk/ack; stream: a stream's, interning and reusing;
// relay-stream: a relay's stream). It reports each one's median time per
// decode over the blocks and their ratio (decoder / baseline: below 1,
// the decoder is faster):
//
//	go test -run '^$' -bench AckDecoderVsBaseline -benchtime 2000x ./internal/dataplane/
func BenchmarkAckDecoderVsBaseline(b *testing.B) {
	const block = 64
	bodies := []struct {
		name string
		data []byte
	}{
		{"single", []byte(`{"client_id":"bench-client-1","ns":"ns-3","revision":4,"status":"ack"}`)},
		{"batch1", batchLine(1)},
		{"batch10", batchLine(10)},
	}
	for _, body := range bodies {
		for _, mode := range []string{"decoder", "stream", "relay-stream"} {
			b.Run(body.name+"/"+mode, func(b *testing.B) {
				relay, fresh := mode == "relay-stream", mode == "decoder"
				dec := ackDecoder{intern: !fresh, reuse: !fresh}
				base := baseAckDecoder{intern: !fresh, reuse: !fresh}
				runNew := func() {
					for range block {
						d := &dec
						if fresh {
							d = &ackDecoder{}
						}
						if _, _, err := d.parse(body.data, false, relay); err != nil {
							b.Fatal(err)
						}
					}
				}
				runBase := func() {
					for range block {
						d := &base
						if fresh {
							d = &baseAckDecoder{}
						}
						if _, _, err := d.parse(body.data, false, relay); err != nil {
							b.Fatal(err)
						}
					}
				}
				var tNew, tBase []time.Duration
				timed := func(run func()) time.Duration {
					start := time.Now()
					run()
					return time.Since(start)
				}
				b.ReportAllocs()
				for i := range b.N {
					if i%2 == 0 {
						tNew = append(tNew, timed(runNew))
						tBase = append(tBase, timed(runBase))
					} else {
						tBase = append(tBase, timed(runBase))
						tNew = append(tNew, timed(runNew))
					}
				}
				b.StopTimer()
				mNew, mBase := medianDuration(tNew)/block, medianDuration(tBase)/block
				b.ReportMetric(float64(mNew.Nanoseconds()), "decoder-ns/decode")
				b.ReportMetric(float64(mBase.Nanoseconds()), "baseline-ns/decode")
				b.ReportMetric(float64(mNew)/float64(mBase), "ratio")
			})
		}
	}
}

func medianDuration(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
