package httpmux

import "strings"

// BearerToken returns the credential of an Authorization header value in
// the Bearer scheme. The scheme name is case-insensitive (RFC 9110 §11.1:
// "bearer", "BEARER" and "Bearer" are one scheme) and may be followed by
// more than one space; ok is false for another scheme or an empty token.
func BearerToken(authorization string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(strings.TrimSpace(authorization), " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(rest)
	return token, token != ""
}
