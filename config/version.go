package config

import "github.com/holdfast-dev/holdfast/internal/version"

// Version is the SDK's version, in semantic versioning without the "v".
// A client sends it in its User-Agent (transport.DefaultUserAgent,
// "holdfast-go/VERSION") and with its acks, so that the server knows each
// client's version.
//
// It is kept by hand: the module has no tag yet, so the build information
// of a binary built with it (runtime/debug.ReadBuildInfo) names the
// module "(devel)" inside its repository, or a pseudo-version
// (v0.0.0-DATE-COMMIT) as a dependency, neither of which says which SDK
// it is.
const Version = version.SDK
