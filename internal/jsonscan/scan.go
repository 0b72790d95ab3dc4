package jsonscan

import (
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is encoding/json's nesting limit: a text with more nested
// arrays and objects is not JSON to it.
const MaxDepth = 10000

// SyntaxError is where (a byte offset) and why a text is not JSON.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.Offset) }

// ErrorAt is the *SyntaxError of a text s that is not JSON at s[i]: it
// has another byte there, or ends, where it should have what.
func ErrorAt(s string, i int, what string) error {
	if i >= len(s) {
		return &SyntaxError{Offset: i, msg: "unexpected end of JSON input, want " + what}
	}
	return &SyntaxError{Offset: i, msg: fmt.Sprintf("invalid character %q, want %s", s[i], what)}
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// scanString checks the JSON string that starts at s[i] (a '"') and returns
// the index just past it, and whether its content is its text: no escapes,
// and valid UTF-8.
func ScanString(s string, i int) (end int, plain bool, err error) {
	plain, ascii := true, true
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			if !ascii && plain {
				plain = utf8.ValidString(s[i+1 : j])
			}
			return j + 1, plain, nil
		case c == '\\':
			plain = false
			j++
			if j >= len(s) {
				return 0, false, ErrorAt(s, j, "an escape")
			}
			switch s[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(s) || !isHex(s[j+k]) {
						return 0, false, ErrorAt(s, j+k, "a hex digit")
					}
				}
				j += 4
			default:
				return 0, false, ErrorAt(s, j, "an escape")
			}
		case c < 0x20:
			return 0, false, ErrorAt(s, j, "a string character")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false, ErrorAt(s, len(s), `'"'`)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber checks the JSON number that starts at s[i] and returns the
// index just past it.
func scanNumber(s string, i int) (int, error) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	default:
		return 0, ErrorAt(s, i, "a digit")
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return 0, ErrorAt(s, i, "a digit after '.'")
		}
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return 0, ErrorAt(s, i, "a digit in the exponent")
		}
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	return i, nil
}

// scanValue checks the JSON value that starts at s[i] (white space is not
// skipped) and returns the index just past it. depth is how many arrays and
// objects already enclose it. It is iterative, so that deep nesting costs
// a byte of stack per level, not a frame.
func scanValue(s string, i, depth int) (int, error) {
	var buf [64]byte
	open := buf[:0] // the '[' or '{' of each enclosing container
	for {
		// A value starts at s[i].
		if i >= len(s) {
			return 0, ErrorAt(s, i, "a value")
		}
		var err error
		switch c := s[i]; c {
		case '{', '[':
			if depth+len(open) >= MaxDepth {
				return 0, &SyntaxError{Offset: i, msg: fmt.Sprintf("more than %d nested arrays and objects", MaxDepth)}
			}
			open = append(open, c)
			i = SkipSpace(s, i+1)
			if i < len(s) && (c == '{' && s[i] == '}' || c == '[' && s[i] == ']') {
				i++
				open = open[:len(open)-1]
				break
			}
			if c == '{' {
				if i, err = scanKey(s, i); err != nil {
					return 0, err
				}
			}
			continue // the first element or member's value
		case '"':
			i, _, err = ScanString(s, i)
		case 't':
			i, err = scanLiteral(s, i, "true")
		case 'f':
			i, err = scanLiteral(s, i, "false")
		case 'n':
			i, err = scanLiteral(s, i, "null")
		default:
			i, err = scanNumber(s, i)
		}
		if err != nil {
			return 0, err
		}
		// After a value: close containers until one goes on with a ','.
		for {
			if len(open) == 0 {
				return i, nil
			}
			i = SkipSpace(s, i)
			top := open[len(open)-1]
			if i < len(s) && s[i] == ',' {
				i = SkipSpace(s, i+1)
				if top == '{' {
					if i, err = scanKey(s, i); err != nil {
						return 0, err
					}
				}
				break
			}
			if i < len(s) && (top == '{' && s[i] == '}' || top == '[' && s[i] == ']') {
				i++
				open = open[:len(open)-1]
				continue
			}
			if top == '{' {
				return 0, ErrorAt(s, i, "',' or '}'")
			}
			return 0, ErrorAt(s, i, "',' or ']'")
		}
	}
}

// SkipValue returns the index just past the JSON value that starts at
// s[i] (white space before it is not skipped), or an error where s stops
// being one that encoding/json accepts. depth is how many arrays and
// objects enclose it, for encoding/json's nesting limit (MaxDepth). It
// allocates nothing below 64 levels of nesting: the server's ack decoder
// skips unknown fields with it, the HTTP source delimits and checks the
// values of a change with it.
func SkipValue(s string, i, depth int) (int, error) { return scanValue(s, i, depth) }

// scanKey checks a member's key and colon, and returns the index of its
// value.
func scanKey(s string, i int) (int, error) {
	if i >= len(s) || s[i] != '"' {
		return 0, ErrorAt(s, i, "a string key")
	}
	i, _, err := ScanString(s, i)
	if err != nil {
		return 0, err
	}
	i = SkipSpace(s, i)
	if i >= len(s) || s[i] != ':' {
		return 0, ErrorAt(s, i, "':'")
	}
	return SkipSpace(s, i+1), nil
}

func scanLiteral(s string, i int, lit string) (int, error) {
	if !strings.HasPrefix(s[i:], lit) {
		return 0, ErrorAt(s, i, lit)
	}
	return i + len(lit), nil
}

// validValue reports why s, trimmed of white space, is not exactly one
// JSON value, or nil.
func ValidValue(s string) error {
	end, err := scanValue(s, 0, 0)
	if err != nil {
		return err
	}
	if end != len(s) {
		return ErrorAt(s, end, "the end after the value")
	}
	return nil
}

// unquote is json.Unmarshal's reading of text, a JSON string that
// scanString accepted: escapes decoded, a surrogate that is not half of a
// pair as U+FFFD, and each byte that is not UTF-8 as U+FFFD. It is here
// rather than a call of json.Unmarshal because it allocates only the
// string it returns: Unmarshal's state cost 200 bytes a call, more than
// the strings themselves when they are short keys.
func Unquote(text string) string {
	var buf [64]byte
	return string(AppendUnquoted(buf[:0], text))
}

// appendUnquoted appends unquote's reading of text to b.
func AppendUnquoted(b []byte, text string) []byte {
	s := text[1 : len(text)-1]
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			i += 2
			switch c = s[i-1]; c {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(s[i:])
				i += 4
				if utf16.IsSurrogate(r) {
					// Half of a pair: with the next escape if it is the other half.
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if pair := utf16.DecodeRune(r, hex4(s[i+2:])); pair != utf8.RuneError {
							b = utf8.AppendRune(b, pair)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
			default: // '"', '\\', '/'
				b = append(b, c)
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			b = utf8.AppendRune(b, r) // utf8.RuneError for a byte that is not UTF-8
			i += size
		}
	}
	return b
}

// hex4 is the value of the 4 hex digits s starts with.
func hex4(s string) rune {
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
