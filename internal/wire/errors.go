package wire

import "errors"

// Sentinel errors that this package's code returns; package transport
// names them (transport.ErrMalformed is ErrMalformed), and its
// documentation says what a client does with each. Test with errors.Is.
var (
	// ErrMalformed: bytes that do not decode, or a value that is not
	// what the protocol allows (EncodeValues' values).
	ErrMalformed = errors.New("transport: malformed message")
	// ErrBadRequest: a request a server refuses as malformed (400
	// bad_request), or one its sender's own check refuses (SendCohort).
	ErrBadRequest = errors.New("transport: bad request")
	// ErrInvalidNamespace: a namespace name that ValidateNamespace
	// refuses.
	ErrInvalidNamespace = errors.New("transport: invalid namespace name")
)
