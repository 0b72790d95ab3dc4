package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/holdfasttest"
	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/transport/etcd"
)

// startEtcd starts a real 3-member etcd cluster on loopback, as the etcd
// module's tests do (Debian's etcd-server binary, or $ETCD_BIN), waits
// for a linearizable read and returns the members' HOST:PORT for -etcd.
// The members are killed at test end.
func startEtcd(t testing.TB) string {
	t.Helper()
	members := startEtcdCluster(t, "http", nil)
	waitEtcd(t, members)
	return members
}

// startEtcdCluster starts the 3-member cluster of startEtcd with its
// client and peer URLs in scheme (http or https) and each member's extra
// flags (TLS files, --auth-token), and returns its members' HOST:PORT
// without waiting for it.
func startEtcdCluster(t testing.TB, scheme string, extra func(member int) []string) string {
	t.Helper()
	bin := os.Getenv("ETCD_BIN")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("etcd"); err != nil {
			const msg = "no etcd binary: install Debian's etcd-server (apt-get install etcd-server, as .ci/run does) or set ETCD_BIN"
			if os.Getenv("CI") != "" {
				t.Fatalf("%s: %v", msg, err)
			}
			t.Skipf("%s: %v", msg, err)
		}
	}
	var ports []int // kept for the test: a member restarted finds its own
	for range 6 {
		ports = append(ports, testutil.LoopbackPort(t))
	}
	var initial, clients []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("m%d=%s://127.0.0.1:%d", i, scheme, ports[2*i+1]))
		clients = append(clients, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	dir, token := t.TempDir(), fmt.Sprintf("holdfast-cmd-test-%d", time.Now().UnixNano())
	for i := range 3 {
		client, peer := scheme+"://"+clients[i], fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i+1])
		log := &lockedBuffer{}
		args := []string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", "50", "--election-timeout", "750", "--logger", "zap", "--log-level", "warn"}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies, so do they
		if err := cmd.Start(); err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("etcd member m%d:\n%s", i, log.String())
			}
		})
	}
	return strings.Join(clients, ",")
}

// waitEtcd waits until the cluster at members answers a linearizable read.
func waitEtcd(t testing.TB, members string) {
	t.Helper()
	var eps []string
	for _, m := range strings.Split(members, ",") {
		eps = append(eps, "http://"+m)
	}
	src, err := etcd.New(etcd.WithEndpoints(eps...))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	testutil.EventuallyNil(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := src.Client().Get(ctx, "health")
		return err
	}, "etcd to be healthy")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// shape is the structure of a JSON value: objects' keys, the distinct
// shapes of arrays' elements, scalars' kinds, so that two replies of the same API compare
// whatever their revisions and times.
func shape(t *testing.T, data string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatalf("not JSON: %q", data)
	}
	var walk func(v any) string
	walk = func(v any) string {
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range v {
					if !yield(k) {
						return
					}
				}
			})
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = k + ":" + walk(v[k])
			}
			return "{" + strings.Join(parts, ",") + "}"
		case []any:
			var elems []string // each distinct shape of an element
			for _, e := range v {
				if s := walk(e); !slices.Contains(elems, s) {
					elems = append(elems, s)
				}
			}
			slices.Sort(elems)
			return "[" + strings.Join(elems, "|") + "]"
		}
		return fmt.Sprintf("%T", v)
	}
	return walk(v)
}

// TestServerOverEtcdCommands: publish, rollback, history, get and diff
// against `holdfast server -etcd` over a real 3-member cluster: the same
// text and the same JSON (field for field) as against the reference
// server, the errors exit 1; reads with -etcd agree; writes with -etcd are
// refused (the server is the only writer); two concurrent `holdfast
// publish -if-revision` processes: one wins.
func TestServerOverEtcdCommands(t *testing.T) {
	members := startEtcd(t)
	srv := holdfasttest.NewServer(t)
	hs := start(t, "server", "-etcd", members, "-addr", "127.0.0.1:0", "-log-format", "json")
	hsURL := hs.stderr.waitFor(t, "serving", hs.done)["url"].(string)

	// The same operations on both servers; their -o json replies, by name.
	replies := map[string][2]string{}
	for i, target := range [][]string{{"-server", hsURL}, {"-server", srv.URL()}} {
		run := func(name string, args ...string) string {
			t.Helper()
			out := mustRun(t, append(append([]string{name}, target...), args...)...)
			if r := replies[name]; r[i] == "" && len(args) > 1 && args[0] == "-o" { // the first JSON of each
				r[i] = out
				replies[name] = r
			}
			return out
		}
		r1 := revisionOf(t, run("publish", "-o", "json", "-actor", "alice", "-reason", "first", "pay", "a=1", "mode=fast"))
		r2 := revisionOf(t, run("publish", "-o", "json", "-actor", "bob", "-if-revision", strconv.FormatInt(r1, 10), "pay", "a=2"))
		errOut := mustFail(t, exitFail, fmt.Sprintf("is at revision %d, not %d", r2, r1), append(append([]string{"publish"}, target...), "-if-revision", strconv.FormatInt(r1, 10), "pay", "a=3")...)
		if !strings.Contains(errOut, "conflict") {
			t.Errorf("%s: the conflict does not say so:\n%s", target[0], errOut)
		}
		r3 := revisionOf(t, run("publish", "-o", "json", "-f", writeFile(t, `{"puts":{"new":true},"deletes":["mode"]}`), "pay"))
		r4 := revisionOf(t, run("rollback", "-o", "json", "-to", strconv.FormatInt(r1, 10), "-actor", "carol", "-reason", "undo", "pay"))

		out := run("history", "pay")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 5 ||
			!strings.Contains(lines[1], fmt.Sprintf("%d", r4)) || !strings.Contains(lines[1], fmt.Sprintf("rollback to %d", r1)) || !strings.Contains(lines[1], "carol") ||
			!strings.Contains(lines[2], "put new; deleted mode") || !strings.Contains(lines[4], "alice") || !strings.Contains(lines[4], "first") {
			t.Errorf("%s: history:\n%s", target[0], out)
		}
		run("history", "-o", "json", "pay")
		if out := run("get", "-revision", strconv.FormatInt(r2, 10), "pay", "a"); out != "2\n" {
			t.Errorf("%s: get -revision %d a = %q", target[0], r2, out)
		}
		run("get", "-o", "json", "pay")
		if v := mustRun(t, append(append([]string{"get"}, target...), "pay")...); !strings.Contains(v, fmt.Sprintf("pay at revision %d", r4)) || !strings.Contains(v, `mode  "fast"`) {
			t.Errorf("%s: get:\n%s", target[0], v)
		}
		var h struct {
			Revisions []controlapi.AuditRecord `json:"revisions"`
		}
		if err := json.Unmarshal([]byte(replies["history"][i]), &h); err != nil || len(h.Revisions) != 4 {
			t.Fatalf("%s: history -o json %q: %v", target[0], replies["history"][i], err)
		}
		at := h.Revisions[2].CommittedAt.Format(time.RFC3339Nano) // r2's
		if out := run("get", "-at", at, "pay", "a"); out != "2\n" {
			t.Errorf("%s: get -at %s a = %q", target[0], at, out)
		}
		out = run("diff", "pay", strconv.FormatInt(r1, 10), strconv.FormatInt(r3, 10))
		if want := fmt.Sprintf("pay: revision %d → %d\na: 1 → 2\nmode: \"fast\" → (absent)\nnew: (absent) → true\n", r1, r3); out != want {
			t.Errorf("%s: diff:\n%s\nwant:\n%s", target[0], out, want)
		}
		run("diff", "-o", "json", "pay", strconv.FormatInt(r1, 10), strconv.FormatInt(r3, 10))

		// The errors: exit 1 (a future revision, a time before the first).
		base := append([]string(nil), target...)
		for _, args := range [][]string{
			{"history", "no.such"},
			{"get", "no.such"},
			{"get", "-revision", strconv.FormatInt(r4+1_000_000, 10), "pay"},
			{"get", "-at", "2020-01-01T00:00:00Z", "pay"},
			{"rollback", "-to", strconv.FormatInt(r4+1_000_000, 10), "pay"},
			{"diff", "no.such", "1", "2"},
		} {
			mustFail(t, exitFail, "(HTTP 4", append(append([]string{args[0]}, base...), args[1:]...)...)
		}
	}
	for name, r := range replies {
		if a, b := shape(t, r[0]), shape(t, r[1]); a != b {
			t.Errorf("%s -o json: holdfast server's\n%s\nthe reference server's\n%s", name, a, b)
		}
	}
	if a, b := mustRun(t, "get", "-etcd", members, "-o", "json", "pay"), mustRun(t, "get", "-server", hsURL, "-o", "json", "pay"); a != b {
		t.Errorf("get -etcd\n%s\nget -server\n%s", a, b)
	}
	mustFail(t, exitUsage, "it is the store's only writer", "publish", "-etcd", members, "pay", "a=1")
	mustFail(t, exitUsage, "it is the store's only writer", "rollback", "-etcd", members, "-to", "1", "pay")

	// Two processes publish on the same revision at once: one wins.
	bin := buildBinary(t)
	var cur struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "get", "-server", hsURL, "-o", "json", "pay")), &cur); err != nil {
		t.Fatal(err)
	}
	rev := cur.Revision
	for round := range 3 {
		results := make(chan ran, 2)
		for i := range 2 {
			args := []string{"publish", "-server", hsURL, "-o", "json", "-if-revision", fmt.Sprint(rev), "pay", fmt.Sprintf("a=%d", 10*round+i)}
			go func() { results <- runBinary(t, bin, nil, args...) }()
		}
		a, b := <-results, <-results
		if a.code != exitOK {
			a, b = b, a
		}
		if a.code != exitOK || b.code != exitFail || !strings.Contains(b.stderr, "conflict") || b.stdout != "" {
			t.Fatalf("round %d: want one exit 0 and one exit 1 with the conflict:\n%+v\n%+v", round, a, b)
		}
		rev = revisionOf(t, a.stdout)
	}
}
