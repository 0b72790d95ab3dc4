package transport

// The quick decoders of change sets and stream progress as they were
// before they shared package jsonscan (strings and integers read by their
// own loops, a put's value delimited by skipValue and then checked by
// json.Valid): the baseline of BenchmarkQuickDecodeVsBaseline, which
// measures both in one run. Generated from http_decode.go as it was then,
// by renaming its identifiers with a "base" prefix; only the benchmark
// uses them.

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"
)

// baseQuickChangeSet reads a change set as servers write it (encoding/json's
// compact output, which a relay passes on as it came), without
// reflection: every client reads one per change, and encoding/json spent
// about 900 bytes and ten microseconds on each. It takes only members ns,
// revision, prev_revision, store_id, committed_at, puts and deletes, each
// at most once, no whitespace between them, names and keys of printable
// ASCII without escapes, a valid change set; values are taken as they are
// (validated by json.Valid), sharing the bytes of Raw. Anything else, ok
// false, is decodeAnyChangeSetJSON's to read or refuse; what it takes,
// that one reads alike (fuzzed).
func baseQuickChangeSet(data []byte) (*ChangeSet, bool) {
	b := bytes.Clone(data) // Raw: the caller's buffer may be reused
	cs := &ChangeSet{Raw: b}
	var seen [7]bool
	ok := baseQuickMembers(b, func(key []byte, i int) (int, bool) {
		var k int
		var v []byte
		var exact, ok bool
		switch string(key) {
		case "ns":
			v, i, ok = baseQuickString(b, i)
			k, cs.Namespace = 0, string(v)
		case "revision":
			k = 1
			cs.Revision, exact, i, ok = baseQuickInt(b, i)
			ok = ok && exact
		case "prev_revision":
			k = 2
			cs.PrevRevision, exact, i, ok = baseQuickInt(b, i)
			ok = ok && exact
		case "store_id":
			v, i, ok = baseQuickString(b, i)
			k, cs.StoreID = 3, string(v)
		case "committed_at":
			k = 4
			start := i
			if _, i, ok = baseQuickString(b, i); ok {
				ok = cs.CommittedAt.UnmarshalJSON(b[start:i]) == nil
			}
		case "puts":
			k = 5
			cs.Puts, i, ok = baseQuickPuts(b, i)
		case "deletes":
			k = 6
			cs.Deletes, i, ok = baseQuickDeletes(b, i)
		}
		if !ok || seen[k] {
			return 0, false
		}
		seen[k] = true
		return i, true
	})
	if !ok {
		return nil, false
	}
	if _, err := checkChangeSet(cs, nil); err != nil {
		return nil, false // encoding/json's to refuse, with its words
	}
	return cs, true
}

// baseQuickMembers reads the members of the object b, with no whitespace
// between them and names as baseQuickString takes them: member reads the
// value of each at b[i:] and returns the index after it. ok false when
// the object is not of that form, or member refused a value (an unknown
// name too).
func baseQuickMembers(b []byte, member func(name []byte, i int) (next int, ok bool)) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	i := 1
	for i < len(b)-1 {
		if i > 1 {
			if b[i] != ',' {
				return false
			}
			i++
		}
		name, next, ok := baseQuickString(b, i)
		if !ok || next >= len(b) || b[next] != ':' {
			return false
		}
		if i, ok = member(name, next+1); !ok {
			return false
		}
	}
	return i == len(b)-1
}

// baseQuickPuts reads a puts object at b[i:]: keys as baseQuickString takes them,
// each once, values as they are (a slice of b, its capacity cut so that
// an append cannot reach the bytes after it).
func baseQuickPuts(b []byte, i int) (map[string]json.RawMessage, int, bool) {
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	puts := make(map[string]json.RawMessage)
	i++
	for first := true; ; first = false {
		if i < len(b) && b[i] == '}' && first {
			return puts, i + 1, true
		}
		key, next, ok := baseQuickString(b, i)
		if !ok || next >= len(b) || b[next] != ':' {
			return nil, 0, false
		}
		end, ok := baseSkipValue(b, next+1)
		if !ok || baseIsSpace(b[next+1]) || baseIsSpace(b[end-1]) || !json.Valid(b[next+1:end]) {
			return nil, 0, false // encoding/json keeps a value without the space around it
		}
		if _, dup := puts[string(key)]; dup {
			return nil, 0, false // encoding/json keeps the last: its to say
		}
		puts[string(key)] = b[next+1 : end : end]
		switch {
		case end < len(b) && b[end] == ',':
			i = end + 1
		case end < len(b) && b[end] == '}':
			return puts, end + 1, true
		default:
			return nil, 0, false
		}
	}
}

// baseQuickDeletes reads a deletes array of strings at b[i:].
func baseQuickDeletes(b []byte, i int) ([]string, int, bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	dels := []string{}
	i++
	for first := true; ; first = false {
		if i < len(b) && b[i] == ']' && first {
			return dels, i + 1, true
		}
		v, next, ok := baseQuickString(b, i)
		if !ok || next >= len(b) {
			return nil, 0, false
		}
		dels = append(dels, string(v))
		switch b[next] {
		case ',':
			i = next + 1
		case ']':
			return dels, next + 1, true
		default:
			return nil, 0, false
		}
	}
}

// baseQuickMaxDepth bounds the nesting of a value baseSkipValue delimits.
// encoding/json refuses a document nested past 10,000 levels, the change
// set's own two (its object and puts) included, though json.Valid takes
// the value alone: a deeper value is left to encoding/json to refuse.
const baseQuickMaxDepth = 512

// baseSkipValue returns the end of the JSON value that starts at b[i]: a
// string, an object or array (brackets counted outside strings), or a
// literal up to the next ',', '}' or ']'. It does not validate (json.Valid
// does); a value it cannot delimit, or nested past baseQuickMaxDepth, is not
// ok.
func baseSkipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			end, ok := baseSkipString(b, j)
			if !ok {
				return 0, false
			}
			if depth == 0 {
				return end, true
			}
			j = end - 1
		case '{', '[':
			if depth++; depth > baseQuickMaxDepth {
				return 0, false
			}
		case '}', ']':
			if depth == 0 {
				return j, j > i
			}
			if depth--; depth == 0 {
				return j + 1, true
			}
		case ',':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return 0, false
}

func baseIsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// baseSkipString returns the index after the string that starts at b[i]
// (escapes skipped, not checked).
func baseSkipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// baseQuickStreamProgress reads a stream progress as servers write it,
// without reflection: a relay sends one to each client with every change,
// and encoding/json spent 280 bytes and a few microseconds on each. It
// takes only the plain form: members store_id (a string of printable
// ASCII, no escape), cursor and age_ms (integers) and unconfirmed (true,
// false or null), each at most once, in any order, no whitespace, the
// progress valid. Anything else, ok false, is decodeStreamProgressJSON's
// to read or refuse; what it takes, that one reads alike (fuzzed).
func baseQuickStreamProgress(b []byte) (p *StreamProgress, ok bool) {
	var out StreamProgress
	var seen [4]bool
	ok = baseQuickMembers(b, func(name []byte, i int) (int, bool) {
		var k int
		var ok bool
		switch string(name) {
		case "store_id":
			var v []byte
			v, i, ok = baseQuickString(b, i)
			k, out.StoreID = 0, string(v)
		case "cursor":
			var exact bool
			out.Cursor, exact, i, ok = baseQuickInt(b, i)
			k, ok = 1, ok && exact // out of int64: encoding/json refuses it
		case "age_ms":
			var n int64
			n, _, i, ok = baseQuickInt(b, i)
			k, out.AgeMillis = 2, min(max(n, 0), maxAgeMillis) // as parseAge: out of range, the bound of its sign
		case "unconfirmed":
			k, ok = 3, true
			switch {
			case bytes.HasPrefix(b[i:], []byte("true")):
				out.Unconfirmed, i = true, i+4
			case bytes.HasPrefix(b[i:], []byte("false")):
				i += 5
			case bytes.HasPrefix(b[i:], []byte("null")):
				i += 4
			default:
				ok = false
			}
		}
		if !ok || seen[k] {
			return 0, false
		}
		seen[k] = true
		return i, true
	})
	if !ok || out.StoreID == "" || !seen[1] || out.Cursor < 0 {
		return nil, false
	}
	return &out, true
}

// baseQuickString reads a JSON string of printable ASCII without escapes at
// b[i:], returning its bytes and the index after its closing quote.
func baseQuickString(b []byte, i int) (v []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// baseQuickInt reads a JSON integer (-?(0|[1-9][0-9]*)) at b[i:]: its value,
// clamped to int64's bound of its sign when out of range (exact false),
// and the index after it.
func baseQuickInt(b []byte, i int) (n int64, exact bool, next int, ok bool) {
	j, neg := i, false
	if j < len(b) && b[j] == '-' {
		j, neg = j+1, true
	}
	start := j
	var u uint64
	exact = true
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		d := uint64(b[j] - '0')
		if u > (math.MaxUint64-d)/10 {
			exact = false
		} else {
			u = u*10 + d
		}
	}
	switch {
	case j == start || b[start] == '0' && j-start > 1:
		return 0, false, 0, false
	case !neg && (!exact || u > math.MaxInt64):
		return math.MaxInt64, false, j, true
	case neg && (!exact || u > 1<<63):
		return math.MinInt64, false, j, true
	case neg:
		return int64(-u), true, j, true
	}
	return int64(u), true, j, true
}

// BenchmarkQuickDecodeVsBaseline alternates blocks of decodes by the quick
// decoders and by their baselines (as they were before they shared package
// jsonscan), block after block, so that both see the same machine load:
// the change set of BenchmarkDecodeChangeSet, one with a larger nested
// value, and a stream progress. It reports each one's median time per
// decode over the blocks and their ratio (quick / baseline: below 1, the
// quick decoder is faster):
//
//	go test -run '^$' -bench QuickDecodeVsBaseline -benchtime 2000x ./transport/
func BenchmarkQuickDecodeVsBaseline(b *testing.B) {
	const block = 64
	change := []byte(`{"ns":"bench","revision":123456,"prev_revision":123455,"store_id":"3f1c2a9e5b7d4c1a","committed_at":"2026-12-02T01:02:03.456789Z","puts":{"k":"12:1733100000000000000"}}`)
	nested := []byte(`{"ns":"bench","revision":123456,"prev_revision":123455,"store_id":"3f1c2a9e5b7d4c1a","committed_at":"2026-12-02T01:02:03.456789Z","puts":{"limits":{"rps":250,"burst":[1,2,3,4],"regions":{"eu":true,"us":false,"ap":null},"note":"a \"quoted\" note \u00e9"},"k":"v"},"deletes":["old","older"]}`)
	progress := []byte(`{"store_id":"3f1c2a9e5b7d4c1a","cursor":123456,"age_ms":12}`)
	cases := []struct {
		name        string
		quick, base func() bool
	}{
		{"change", func() bool { _, ok := quickChangeSet(change); return ok }, func() bool { _, ok := baseQuickChangeSet(change); return ok }},
		{"change-nested", func() bool { _, ok := quickChangeSet(nested); return ok }, func() bool { _, ok := baseQuickChangeSet(nested); return ok }},
		{"progress", func() bool { _, ok := quickStreamProgress(progress); return ok }, func() bool { _, ok := baseQuickStreamProgress(progress); return ok }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			timed := func(decode func() bool) time.Duration {
				start := time.Now()
				for range block {
					if !decode() {
						b.Fatal("the quick path refused the body")
					}
				}
				return time.Since(start)
			}
			var tq, tb []time.Duration
			b.ReportAllocs()
			for i := range b.N {
				if i%2 == 0 {
					tq = append(tq, timed(c.quick))
					tb = append(tb, timed(c.base))
				} else {
					tb = append(tb, timed(c.base))
					tq = append(tq, timed(c.quick))
				}
			}
			b.StopTimer()
			mq, mb := medianOf(tq)/block, medianOf(tb)/block
			b.ReportMetric(float64(mq.Nanoseconds()), "quick-ns/decode")
			b.ReportMetric(float64(mb.Nanoseconds()), "baseline-ns/decode")
			b.ReportMetric(float64(mq)/float64(mb), "ratio")
		})
	}
}

func medianOf(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
