package jsonscan

import (
	"unicode/utf16"
	"unicode/utf8"
)

// CheckUnicode reports where the JSON text s holds what is not Unicode
// text: a byte that is not UTF-8, or a \u escape of half a surrogate
// pair without its other half ("\ud800"), which encoding/json reads as
// U+FFFD without a word, so that a value would be stored as sent and read
// back as another. It returns nil for a text of Unicode only. It reads
// escapes wherever a backslash is, which in JSON is only in strings: on
// a text that is not JSON its answer means nothing.
func CheckUnicode(s string) error {
	if !utf8.ValidString(s) {
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return &SyntaxError{Offset: i, msg: "a byte that is not UTF-8"}
			}
			i += size
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if i+1 >= len(s) || s[i+1] != 'u' || i+6 > len(s) || !isHex4(s[i+2:i+6]) {
			i++ // another escape: skip its character
			continue
		}
		r := hex4(s[i+2:])
		switch {
		case !utf16.IsSurrogate(r):
		case r < 0xdc00 && i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' && isHex4(s[i+8:i+12]) &&
			utf16.DecodeRune(r, hex4(s[i+8:])) != utf8.RuneError:
			i += 6 // the pair's second half
		default:
			return &SyntaxError{Offset: i, msg: "an escape of half a surrogate pair (\\" + s[i+1:i+6] + ") without its other half"}
		}
		i += 5
	}
	return nil
}

func isHex4(s string) bool {
	return isHex(s[0]) && isHex(s[1]) && isHex(s[2]) && isHex(s[3])
}
