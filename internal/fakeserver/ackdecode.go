package fakeserver

import (
	"strings"
	"unicode/utf8"
	"unsafe"

	snap "github.com/holdfast-dev/holdfast/internal/snapshot" // its JSON scanner
	"github.com/holdfast-dev/holdfast/transport"
)

// ackDecoder decodes ack bodies (one transport.Ack, or a
// transport.AckBatch) as json.Unmarshal into an ackBody does, for the
// shape clients send, at a fraction of its cost: the server decodes one
// body per client per publish. What it does not read itself it leaves to
// encoding/json (decode). A stream's decoder (intern) keeps the strings
// it made, so that its client's id and namespaces are allocated once per
// stream rather than once per ack.
type ackDecoder struct {
	intern bool
	names  map[string]string // intern: strings made, each its own key
}

// maxInterned bounds the strings a stream's decoder keeps: a client has
// one id and a few namespaces; a stream that names more allocates the
// rest as they come.
const maxInterned = 128

// parse is parseAckBody, decoding with d.
func (d *ackDecoder) parse(data []byte, ownIDs, relay bool) (acks []transport.Ack, batch bool, err error) {
	if relay {
		return parseRelayedAckBody(data, ownIDs)
	}
	var body ackBody
	if !d.decode(data, &body) {
		// A body of its own, fresh (encoding/json would merge into what
		// decode left), so that body stays on the stack.
		fallback := new(ackBody)
		if err := unmarshal(data, fallback); err != nil {
			return nil, false, err
		}
		body = *fallback
	}
	return checkAckBody(body, ownIDs)
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
	// is kept is copied (keep, keepText).
	s := unsafe.String(unsafe.SliceData(data), len(data))
	i, ok := d.object(s, skipWS(s, 0), &body.Ack, &body.Acks, 1)
	return ok && skipWS(s, i) == len(s)
}

// object reads the JSON object at s[i] into *a, and into *acks its "acks"
// (the body itself; nil for an ack of a batch). depth is how many arrays
// and objects enclose the object's members. It returns the index just
// past the object.
func (d *ackDecoder) object(s string, i int, a *transport.Ack, acks *[]transport.Ack, depth int) (int, bool) {
	if i >= len(s) || s[i] != '{' {
		return 0, false
	}
	if i = skipWS(s, i+1); i < len(s) && s[i] == '}' {
		return i + 1, true
	}
	seenAcks := false
	for {
		key, j, ok := fieldName(s, i)
		if !ok {
			return 0, false
		}
		if j = skipWS(s, j); j >= len(s) || s[j] != ':' {
			return 0, false
		}
		i = skipWS(s, j+1)
		switch {
		case key == "client_id":
			i, ok = d.str(s, i, &a.ClientID, true)
		case key == "ns":
			i, ok = d.str(s, i, &a.Namespace, true)
		case key == "status":
			i, ok = d.str(s, i, &a.Status, true)
		case key == "error":
			i, ok = d.str(s, i, &a.Error, false)
		case key == "revision":
			i, ok = readInt(s, i, &a.Revision)
		case key == "acks" && acks != nil:
			if seenAcks {
				return 0, false
			}
			seenAcks = true
			i, ok = d.array(s, i, acks)
		default: // a field this version does not know
			var err error
			i, err = snap.SkipValue(s, i, depth)
			ok = err == nil
		}
		if !ok {
			return 0, false
		}
		switch i = skipWS(s, i); {
		case i < len(s) && s[i] == ',':
			i = skipWS(s, i+1)
		case i < len(s) && s[i] == '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
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
	if i = skipWS(s, i+1); i < len(s) && s[i] == ']' {
		*acks = []transport.Ack{} // empty, not nil: a batch
		return i + 1, true
	}
	var buf [16]transport.Ack // a batch that fits allocates only its copy
	out := buf[:0]
	for {
		var a transport.Ack
		var ok bool
		if strings.HasPrefix(s[i:], "null") {
			i += 4
		} else if i, ok = d.object(s, i, &a, nil, 3); !ok {
			return 0, false
		}
		out = append(out, a)
		switch i = skipWS(s, i); {
		case i < len(s) && s[i] == ',':
			i = skipWS(s, i+1)
		case i < len(s) && s[i] == ']':
			*acks = append(make([]transport.Ack, 0, len(out)), out...)
			return i + 1, true
		default:
			return 0, false
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
	}
	if k, ok := d.names[v]; ok {
		return k
	}
	k := strings.Clone(v)
	if d.intern && len(d.names) < maxInterned && len(k) <= maxClientIDLen {
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
				for _, f := range [...]string{"client_id", "ns", "revision", "status", "error", "acks"} {
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

// skipWS returns the index of the first byte at or after i that is not
// JSON white space.
func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}
