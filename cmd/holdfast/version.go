package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/holdfast-dev/holdfast/internal/version"
)

// The service names of the long-running commands: their OTel resource's
// service.name (Prometheus's target_info).
const (
	serverService = "holdfast-server"
	relayService  = "holdfast-relay"
)

func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print holdfast's version, its build's module version and commit, and Go's",
		doc: `
Version prints the SDK's version (config.Version, which clients send in
their User-Agent and with their acks), the module's version as the build
information names it ("(devel)" for a build inside the repository: the
module has no tag yet), the commit it was built from and whether the work
tree had changes (when the binary carries them: go build in a git
checkout does, go run does not), and the Go version. 'holdfast -version'
and 'holdfast --version' are the same. The server's and the relay's
/statusz show the same under "build".`,
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			output := newChoice(fs, "o", "output", "text", "json")
			return func(_ context.Context, e *env, _ []string) error {
				in := version.Read()
				if output.value == "json" {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(in)
				}
				return printVersion(e.stdout, in)
			}
		},
	}
}

// printVersion prints in as `holdfast version` does.
func printVersion(w io.Writer, in version.Info) error {
	tw := newTable(w)
	tw.row("holdfast", in.Version)
	mod := orDash(in.ModuleVersion)
	if in.Path != "" {
		mod = in.Path + " " + mod
	}
	tw.row("module", mod)
	if in.SDKModuleVersion != "" {
		tw.row("sdk module", version.Module+" "+in.SDKModuleVersion)
	}
	rev := "- (not in the build information)"
	if in.Revision != "" {
		rev = in.Revision
		if in.Time != "" {
			rev += " (" + in.Time + ")"
		}
		if in.Modified {
			rev += ", modified"
		}
	}
	tw.row("commit", rev)
	tw.row("go", in.Go)
	if err := tw.flush(); err != nil {
		return fmt.Errorf("version: %w", err)
	}
	return nil
}

// buildAttrs are the log attributes of the build, for the line a server
// or relay logs when it starts serving: the version, and the commit when
// the binary carries one.
func buildAttrs() []any {
	in := version.Read()
	attrs := []any{"version", in.Version}
	if in.Revision != "" {
		attrs = append(attrs, "commit", in.Revision)
	}
	return attrs
}
