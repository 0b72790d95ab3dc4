package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: Module + "/cmd/holdfast", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "example.com/other", Version: "v1.2.3"},
			{Path: Module, Version: "v0.0.0-20261206170000-0123456789ab"},
		},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-12-06T17:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := FromBuildInfo(bi)
	want := Info{Version: SDK, Path: Module + "/cmd/holdfast", ModuleVersion: "(devel)",
		SDKModuleVersion: "v0.0.0-20261206170000-0123456789ab",
		Revision:         "0123456789abcdef", Time: "2026-12-06T17:00:00Z", Modified: true, Go: "go1.99.1"}
	if got != want {
		t.Errorf("FromBuildInfo:\n%+v\nwant\n%+v", got, want)
	}

	// The SDK's own module: no separate SDK module version; no VCS.
	got = FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: Module, Version: "(devel)"},
		Deps: []*debug.Module{{Path: Module, Version: "v9.9.9"}}})
	want = Info{Version: SDK, Path: Module, ModuleVersion: "(devel)", Go: "go1.99.1"}
	if got != want {
		t.Errorf("FromBuildInfo of the SDK's module:\n%+v\nwant\n%+v", got, want)
	}

	if got := FromBuildInfo(nil); got != (Info{Version: SDK, Go: runtime.Version()}) {
		t.Errorf("FromBuildInfo(nil) = %+v", got)
	}
}

func TestUserAgent(t *testing.T) {
	if got, want := UserAgent("holdfast-go"), "holdfast-go/"+SDK; got != want {
		t.Errorf("UserAgent = %q, want %q", got, want)
	}
}
