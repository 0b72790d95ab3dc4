package transport

// countMembers counts the members of obj, one JSON object that json.Valid
// accepts, and stops counting past limit. It allocates nothing: it is how
// a snapshot with too many keys is refused before anything is built for
// them.
func countMembers(obj []byte, limit int) int {
	n, depth := 0, 0
	for i := 0; i < len(obj); i++ {
		switch obj[i] {
		case '"':
			for i++; i < len(obj) && obj[i] != '"'; i++ {
				if obj[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 1 {
				if n++; n > limit {
					return n
				}
			}
		}
	}
	return n
}
