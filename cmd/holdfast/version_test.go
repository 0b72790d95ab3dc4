package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/internal/version"
	"go.opentelemetry.io/otel/attribute"
)

// TestVersionCommand: version, -version and --version print the SDK's
// version, the module's and Go's, exit 0; -o json is version.Info.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		code, stdout, stderr := cli(t, args...)
		if code != exitOK || stderr != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
		for _, want := range []string{"holdfast  " + config.Version, "module ", "commit ", "go  " + runtime.Version()} {
			if !strings.Contains(strings.Join(strings.Fields(stdout), "  "), strings.Join(strings.Fields(want), "  ")) {
				t.Errorf("%v: no %q in\n%s", args, want, stdout)
			}
		}
	}
	code, stdout, _ := cli(t, "--version", "-o", "json")
	var in version.Info
	if code != exitOK || json.Unmarshal([]byte(stdout), &in) != nil || in != version.Read() {
		t.Fatalf("--version -o json: exit %d, %+v, want %+v\n%s", code, in, version.Read(), stdout)
	}
	if code, _, stderr := cli(t, "version", "extra"); code != exitUsage || !strings.Contains(stderr, "takes no arguments") {
		t.Errorf("version extra: exit %d, %q", code, stderr)
	}
}

// TestVersionBinary: the binary built in its git checkout carries the
// commit it was built from, and prints it. It builds with -buildvcs=true:
// $GOFLAGS may say -buildvcs=false (as on machines that build without
// git), and then a binary carries no commit.
func TestVersionBinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the binary with")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("no git checkout: %v", err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	// The go command finds a git checkout by its .git directory: a
	// worktree's .git is a file, and its builds carry no commit.
	if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (its .git is no directory): the go command stamps no commit in its builds")
	}
	bin := filepath.Join(t.TempDir(), "holdfast")
	if out, err := exec.Command(goTool, "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("holdfast version: %v", err)
	}
	var in version.Info
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if in.Version != config.Version || in.Revision != strings.TrimSpace(string(head)) || in.Path != "github.com/holdfast-dev/holdfast/cmd/holdfast" || in.Go == "" {
		t.Errorf("holdfast version -o json: %+v, want version %s at commit %s", in, config.Version, head)
	}
	out, err = exec.Command(bin, "-version").Output()
	if err != nil || !strings.Contains(string(out), in.Revision) {
		t.Errorf("holdfast -version: %v\n%s", err, out)
	}
}

// TestServiceResource: the OTel resource names the service and its
// version; $OTEL_SERVICE_NAME wins.
func TestServiceResource(t *testing.T) {
	res, err := serviceResource(relayService)
	if err != nil {
		t.Fatal(err)
	}
	set := res.Set()
	if v, _ := set.Value("service.name"); v != attribute.StringValue(relayService) {
		t.Errorf("service.name = %v", v.AsString())
	}
	if v, _ := set.Value("service.version"); v != attribute.StringValue(config.Version) {
		t.Errorf("service.version = %v", v.AsString())
	}
	t.Setenv("OTEL_SERVICE_NAME", "edge-relay")
	if res, err = serviceResource(relayService); err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Set().Value("service.name"); v != attribute.StringValue("edge-relay") {
		t.Errorf("with $OTEL_SERVICE_NAME, service.name = %v", v.AsString())
	}
}
