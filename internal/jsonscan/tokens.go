package jsonscan

import (
	"math"
)

// Int reads the JSON number at s[i] if it is an integer,
// -?(0|[1-9][0-9]*), not followed by a fraction or an exponent; ok is
// false otherwise. n is its value when it fits an int64 (exact), else the
// bound of its sign (exact false: json.Unmarshal into an int64 fails
// there); next is the index just past it.
func Int(s string, i int) (n int64, next int, exact, ok bool) {
	j, neg := i, false
	if j < len(s) && s[j] == '-' {
		j, neg = j+1, true
	}
	start := j
	var u uint64
	for ; j < len(s) && isDigit(s[j]); j++ {
		u = u*10 + uint64(s[j]-'0') // 19 digits cannot wrap; more are out of range anyway
	}
	switch digits := j - start; {
	case digits == 0 || digits > 1 && s[start] == '0':
		return 0, 0, false, false
	case j < len(s) && (s[j] == '.' || s[j] == 'e' || s[j] == 'E'):
		return 0, 0, false, false
	case !neg && (digits > 19 || u > math.MaxInt64):
		return math.MaxInt64, j, false, true
	case neg && (digits > 19 || u > 1<<63):
		return math.MinInt64, j, false, true
	case neg:
		return -int64(u), j, true, true // 1<<63 wraps to math.MinInt64, as it should
	}
	return int64(u), j, true, true
}
