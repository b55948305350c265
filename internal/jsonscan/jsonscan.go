// Package jsonscan walks the top level of a JSON object in one pass, checking
// the whole text with the grammar encoding/json's Unmarshal accepts, so that
// a caller can decode only the members it needs instead of decoding (and
// first validating) the whole document with encoding/json.
//
// It exists for the gateway's request path: reading the usage of a provider
// answer with encoding/json scanned the whole answer twice (its validation
// and its decode, skipping every field but one), about 5 % of a busy
// gateway's CPU. A caller keeps encoding/json's answer for every input: when
// Object says false (the text is not one object encoding/json accepts, or
// the scan cannot decide) it takes encoding/json's path, and the members it
// gets are decoded with encoding/json; FuzzObject checks Object's verdict
// against json.Valid.
//
// Not gjson or fastjson: the gateway must accept and refuse exactly the
// bodies encoding/json does, and match keys as it does (case-insensitively,
// repeated members decoded in turn), which is what the differential fuzz targets
// check; gjson does not validate what it reads, and both match keys
// exactly, so either would need the same checks around it.
package jsonscan

// maxDepth is encoding/json's nesting limit: deeper text is an error there.
// Object gives up (false) at it, and the caller's encoding/json path says so.
const maxDepth = 10000

// Object reports whether b is exactly one JSON object (with surrounding
// whitespace) that encoding/json accepts, calling member for each of its
// top-level members in order with the key's raw bytes (between the quotes,
// escapes not decoded) and the value's bytes. member is called while the
// scan goes on: a caller must not act on what it saw until Object returns
// true. escaped says whether the key holds a backslash (an escape the caller
// would have to decode to compare it).
func Object(b []byte, member func(key []byte, escaped bool, value []byte)) bool {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == '}' {
		s.i++
	} else {
		for {
			if s.i >= len(b) || b[s.i] != '"' {
				return false
			}
			k0 := s.i + 1
			esc, ok := s.str()
			if !ok {
				return false
			}
			key := b[k0 : s.i-1]
			s.ws()
			if s.i >= len(b) || b[s.i] != ':' {
				return false
			}
			s.i++
			s.ws()
			v0 := s.i
			if !s.value(1) {
				return false
			}
			member(key, esc, b[v0:s.i])
			if done, ok := s.next('}'); !ok {
				return false
			} else if done {
				break
			}
		}
	}
	s.ws()
	return s.i == len(b)
}

// next steps over what follows a member or an element: done at the
// closing byte, ok false at anything but it or a comma.
func (s *scanner) next(closing byte) (done, ok bool) {
	s.ws()
	switch {
	case s.i >= len(s.b):
		return false, false
	case s.b[s.i] == closing:
		s.i++
		return true, true
	case s.b[s.i] != ',':
		return false, false
	}
	s.i++
	s.ws()
	return false, true
}

type scanner struct {
	b []byte
	i int
}

// ws skips JSON whitespace (space, tab, CR, LF: nothing else).
func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// value scans one value at nesting depth (1 = a member of the top object).
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *scanner) object(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		if _, ok := s.str(); !ok {
			return false
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !s.value(depth) {
			return false
		}
		if done, ok := s.next('}'); !ok || done {
			return ok
		}
	}
}

func (s *scanner) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		if done, ok := s.next(']'); !ok || done {
			return ok
		}
	}
}

// str scans a string from its opening quote through its closing one. As in
// encoding/json, any byte from 0x20 up is allowed unescaped (invalid UTF-8
// too: Unmarshal replaces it), a control byte is not, and an escape is one of
// \" \\ \/ \b \f \n \r \t or \u and four hex digits.
func (s *scanner) str() (escaped, ok bool) {
	s.i++ // '"'
	for s.i < len(s.b) {
		// Plain bytes, the bulk of a prompt, in a tight loop.
		for s.i < len(s.b) && plain[s.b[s.i]] {
			s.i++
		}
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, true
		case c < 0x20:
			return escaped, false
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return escaped, false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return escaped, false
					}
					s.i++
				}
			default:
				return escaped, false
			}
		default:
			s.i++
		}
	}
	return escaped, false
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits scans [0-9]* and reports whether there was at least one.
func (s *scanner) digits() bool {
	i0 := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > i0
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// plain marks the bytes a string holds as they are: all but the quote, the
// backslash and the control bytes.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// KeyOf returns which of names key matches as encoding/json matches a
// struct's field names ("" for none); sure is false when a name needs the
// key's escapes decoded to tell (the caller's encoding/json path does).
func KeyOf(key []byte, escaped bool, names []string) (name string, sure bool) {
	for _, n := range names {
		match, sure := KeyIs(key, escaped, n)
		if !sure {
			return "", false
		}
		if match {
			return n, true
		}
	}
	return "", true
}

// KeyIs reports whether a member's raw key (unescaped, as Object gives it)
// is matched by encoding/json to a struct field named name (ASCII): exactly
// or folding ASCII case. ok is false when the key holds an escape or a
// non-ASCII byte: encoding/json's folding of those (the Kelvin sign, the
// long s) is not decided here, and the caller takes encoding/json's path.
func KeyIs(key []byte, escaped bool, name string) (match, ok bool) {
	if escaped {
		return false, false
	}
	for _, c := range key {
		if c >= 0x80 {
			return false, false
		}
	}
	if len(key) != len(name) {
		return false, true
	}
	for i := range key {
		a, b := key[i], name[i]
		if a >= 'A' && a <= 'Z' {
			a += 'a' - 'A'
		}
		if b >= 'A' && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false, true
		}
	}
	return true, true
}

// Array reports whether b is exactly one JSON array (with surrounding
// whitespace) that encoding/json accepts, calling elem for each element's
// bytes in order; as with Object, act on them only once it returns true.
func Array(b []byte, elem func(value []byte)) bool {
	s := scanner{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '[' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(b) && b[s.i] == ']' {
		s.i++
	} else {
		for {
			v0 := s.i
			if !s.value(1) {
				return false
			}
			elem(b[v0:s.i])
			if done, ok := s.next(']'); !ok {
				return false
			} else if done {
				break
			}
		}
	}
	s.ws()
	return s.i == len(b)
}
