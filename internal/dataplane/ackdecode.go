package dataplane

import (
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/holdfast-dev/holdfast/internal/jsonscan"
	"github.com/holdfast-dev/holdfast/internal/version"
	"github.com/holdfast-dev/holdfast/transport"
)

// ackDecoder decodes ack bodies (one transport.Ack, or a
// wire.AckBatch) as json.Unmarshal into an ackBody does, for the
// shape clients send, at a fraction of its cost: the server decodes one
// body per client per publish. What it does not read itself it leaves to
// encoding/json (decode). A stream's decoder (intern) keeps the strings
// it made, so that its client's id and namespaces are allocated once per
// stream rather than once per ack; and (reuse) decodes every batch into
// one slice, valid until the next body.
type ackDecoder struct {
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

// maxInterned bounds the strings a stream's decoder keeps: a client has
// one id and a few namespaces; a stream that names more allocates the
// rest as they come.
const maxInterned = 128

// parse is parseAckBody, decoding with d.
func (d *ackDecoder) parse(data []byte, ownIDs, relay bool) (acks []transport.Ack, batch bool, err error) {
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
func (d *ackDecoder) decode(data []byte, body *ackBody) bool {
	// s aliases data, which may be reused once the body is decoded: what
	// is kept is copied (str).
	s := unsafe.String(unsafe.SliceData(data), len(data))
	d.other = false
	i, ok := d.body(s, jsonscan.SkipSpace(s, 0), body)
	return ok && jsonscan.SkipSpace(s, i) == len(s)
}

// body reads the object at s[i] into *b and returns the index just past
// it. (It and ack are two functions rather than one that calls itself
// through array so that array's buffer stays on the stack.)
func (d *ackDecoder) body(s string, i int, b *ackBody) (int, bool) {
	i, more, ok := openObject(s, i)
	seenAcks := false
	for more && ok {
		var key string
		start := i
		if key, i, ok = member(s, i); !ok {
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
			i, more, ok = nextMember(s, i)
		}
	}
	return i, ok
}

// ack reads the object at s[i], an element of "acks", into *a and
// returns the index just past it.
func (d *ackDecoder) ack(s string, i int, a *transport.Ack) (int, bool) {
	i, more, ok := openObject(s, i)
	for more && ok {
		var key string
		start := i
		if key, i, ok = member(s, i); ok {
			d.noteKey(s, start, key)
			if i, ok = d.field(s, i, key, a, 3); ok {
				i, more, ok = nextMember(s, i)
			}
		}
	}
	return i, ok
}

// noteKey sets d.other unless the key at s[start] is exactly key, the
// field member found it to name (a key in another case names one too).
func (d *ackDecoder) noteKey(s string, start int, key string) {
	if !strings.HasPrefix(s[start+1:], key+`"`) {
		d.other = true
	}
}

// field reads the value at s[i] of the member key into its field of *a,
// or skips it: a field this version does not know. depth is how many
// arrays and objects enclose the value.
func (d *ackDecoder) field(s string, i int, key string, a *transport.Ack, depth int) (int, bool) {
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
	case "sdk_version":
		return d.str(s, i, &a.SDKVersion, true)
	case "identity":
		return d.str(s, i, &a.Identity, true)
	case "revision":
		return readInt(s, i, &a.Revision)
	}
	d.other = true
	i, err := jsonscan.SkipValue(s, i, depth)
	return i, err == nil
}

// openObject reads the '{' at s[i] and the white space after it; more
// says whether a member follows (or the object ends at once, '}' read).
func openObject(s string, i int) (next int, more, ok bool) {
	if i >= len(s) || s[i] != '{' {
		return 0, false, false
	}
	if i = jsonscan.SkipSpace(s, i+1); i < len(s) && s[i] == '}' {
		return i + 1, false, true
	}
	return i, true, true
}

// member reads a member's key at s[i] and its colon, and returns the
// field the key names (fieldName) and the index of the value.
func member(s string, i int) (key string, value int, ok bool) {
	key, i, ok = fieldName(s, i)
	if !ok {
		return "", 0, false
	}
	if i = jsonscan.SkipSpace(s, i); i >= len(s) || s[i] != ':' {
		return "", 0, false
	}
	return key, jsonscan.SkipSpace(s, i+1), true
}

// nextMember reads what follows a member's value at s[i]: a ',' and the
// white space after it (more), or the '}' that ends the object.
func nextMember(s string, i int) (next int, more, ok bool) {
	switch i = jsonscan.SkipSpace(s, i); {
	case i < len(s) && s[i] == ',':
		return jsonscan.SkipSpace(s, i+1), true, true
	case i < len(s) && s[i] == '}':
		return i + 1, false, true
	}
	return 0, false, false
}

// array reads the "acks" at s[i] into *acks: null, or an array of ack
// objects (a null element is a zero Ack, as encoding/json makes it).
func (d *ackDecoder) array(s string, i int, acks *[]transport.Ack) (int, bool) {
	if strings.HasPrefix(s[i:], "null") {
		*acks = nil
		return i + 4, true
	}
	if i >= len(s) || s[i] != '[' {
		return 0, false
	}
	if i = jsonscan.SkipSpace(s, i+1); i < len(s) && s[i] == ']' {
		*acks = []transport.Ack{} // empty, not nil: a batch
		return i + 1, true
	}
	if d.reuse {
		var ok bool
		i, d.acks, ok = d.elements(s, i, d.acks[:0])
		*acks = d.acks
		if cap(d.acks) > maxReused {
			d.acks = nil // a stream keeps no big batch's room
		}
		return i, ok
	}
	var buf [16]transport.Ack // a batch that fits allocates only its copy
	i, out, ok := d.elements(s, i, buf[:0])
	*acks = append(make([]transport.Ack, 0, len(out)), out...)
	return i, ok
}

// maxReused bounds the acks a stream's decoder keeps room for.
const maxReused = 64

// elements reads the elements of an array of acks from s[i], past its
// '[', appending them to out, and returns the index past the array.
func (d *ackDecoder) elements(s string, i int, out []transport.Ack) (int, []transport.Ack, bool) {
	for {
		var a transport.Ack
		var ok bool
		if strings.HasPrefix(s[i:], "null") {
			i += 4
		} else if i, ok = d.ack(s, i, &a); !ok {
			return 0, out, false
		}
		out = append(out, a)
		switch i = jsonscan.SkipSpace(s, i); {
		case i < len(s) && s[i] == ',':
			i = jsonscan.SkipSpace(s, i+1)
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
func (d *ackDecoder) str(s string, i int, v *string, intern bool) (int, bool) {
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
func (d *ackDecoder) keep(v string) string {
	switch v {
	case "":
		return ""
	case transport.AckApplied:
		return transport.AckApplied
	case transport.AckRejected:
		return transport.AckRejected
	case transport.AckWouldReject:
		return transport.AckWouldReject
	case version.SDK: // this version's clients' sdk_version
		return version.SDK
	}
	if k, ok := d.names[v]; ok {
		return k
	}
	k := strings.Clone(v)
	if d.intern && len(d.names) < maxInterned && len(k) <= transport.MaxClientIDBytes {
		if d.names == nil {
			d.names = make(map[string]string)
		}
		d.names[k] = k
	}
	return k
}

// fieldName reads the key at s[i] and returns the field it names (the
// key itself when it names none), and the index just past it. A key with
// upper-case letters names the field it equals case-insensitively, as in
// encoding/json; one with an escape or a byte that is not ASCII is left
// to encoding/json.
func fieldName(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	upper := false
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			key := s[i+1 : j]
			if upper {
				for _, f := range [...]string{"client_id", "ns", "revision", "status", "error", "rollout", "sdk_version", "acks"} {
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

// readInt reads the JSON number or null at s[i] into *v as encoding/json
// reads one into an int64; a fraction, an exponent or a value out of
// range is its error, left to it.
func readInt(s string, i int, v *int64) (int, bool) {
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
