// Package jsonscan is the project's one JSON scanner: the low-level reading
// that its three hand-written decoders share, so that each is fast on the
// shape its peers write while reading exactly what encoding/json reads.
//
//   - internal/snapshot walks a snapshot's values in place (BuildJSON);
//   - transport's HTTP source reads change sets and stream progress
//     events (quickChangeSet, quickStreamProgress), every client one per
//     publish;
//   - the data plane's ack decoder (internal/dataplane, ackDecoder) reads
//     acks, one per client per publish, on the relay's and the server's
//     hot path.
//
// The decoders differ in what they build and in what they leave to
// encoding/json (each falls back on it for a shape it does not read), so
// they stay three; what they share is here: white space (SkipSpace),
// strings (ScanString checks one and says whether its text is its
// content; Unquote decodes one as json.Unmarshal does), integers (Int, as
// json.Unmarshal reads one into an int64), and whole values (SkipValue,
// ValidValue: what json.Valid accepts, with encoding/json's nesting
// limit), and Unicode (CheckUnicode: a text's bytes UTF-8 and its \u
// escapes no lone surrogate, what values from clients must be before they
// are stored). The fast paths' own readers of a string without escapes, and
// the ack decoder's of an integer, stay in their decoders: shared, they
// measured 2-10% slower on those paths (a shared reader does not inline
// there), and those decoders exist to be fast.
//
// It works on strings: a caller with bytes it does not write while it
// scans may alias them (unsafe.String) rather than copy them. Every
// function takes the text and an index and returns the index after what
// it read; none keeps the text, and none but the unquoting ones
// allocates (below 64 levels of nesting). The fuzz targets of this package
// compare each function with encoding/json.
package jsonscan
