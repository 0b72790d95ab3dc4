// Package version is the SDK's version and what a binary's build
// information says of it: the User-Agent the SDK and the relay send, the
// version an SDK reports with its acks, and what `holdfast version` and
// /statusz print. It is a leaf: transport and config both use it.
package version

import (
	"runtime"
	"runtime/debug"
)

// SDK is the SDK's version (config.Version), kept by hand, in semantic
// versioning without the "v". The module has no tag yet, so a binary's
// build information names it "(devel)" (built inside its repository) or a
// pseudo-version (v0.0.0-DATE-COMMIT, built as a dependency): SDK is the
// version a client reports, and what a server compares.
const SDK = "0.1.0"

// Module is the SDK's module path.
const Module = "github.com/holdfast-dev/holdfast"

// UserAgent is product/SDK, e.g. "holdfast-go/0.1.0".
func UserAgent(product string) string { return product + "/" + SDK }

// Info is what a binary knows of its version.
type Info struct {
	// Version is SDK.
	Version string `json:"version"`
	// Path and ModuleVersion are the main module's path and version as
	// the build information names them: "(devel)" for a build inside its
	// repository, a pseudo-version or a tag's version for one installed
	// with go install; empty when the binary carries no build information.
	Path          string `json:"module"`
	ModuleVersion string `json:"module_version"`
	// SDKModuleVersion is the SDK module's version when the main module
	// is another one (holdfast's command, a service using the SDK).
	SDKModuleVersion string `json:"sdk_module_version,omitempty"`
	// Revision, Time and Modified are the version control's commit, its
	// time, and whether the work tree had changes, when the binary
	// carries them (a go build in a git checkout does; go run and go test
	// do not).
	Revision string `json:"vcs_revision,omitempty"`
	Time     string `json:"vcs_time,omitempty"`
	Modified bool   `json:"vcs_modified,omitempty"`
	// Go is the Go version the binary was built with.
	Go string `json:"go_version"`
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo returns the Info of build information bi (nil: none).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: SDK, Go: runtime.Version()}
	if bi == nil {
		return in
	}
	if bi.GoVersion != "" {
		in.Go = bi.GoVersion
	}
	in.Path, in.ModuleVersion = bi.Main.Path, bi.Main.Version
	if bi.Main.Path != Module {
		for _, d := range bi.Deps {
			if d.Path == Module {
				in.SDKModuleVersion = d.Version
				if d.Replace != nil && d.Replace.Version != "" {
					in.SDKModuleVersion = d.Replace.Version
				}
				break
			}
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}
