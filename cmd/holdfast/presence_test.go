package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/config"
	"github.com/holdfast-dev/holdfast/controlapi"
	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// presenceChildEnv makes the test binary an SDK client process
// (TestPresenceChild): "ENDPOINT CLIENT-ID".
const presenceChildEnv = "HOLDFAST_PRESENCE_CHILD"

// TestPresenceChild is the SDK client process of
// TestPresenceAcrossServers: it opens "app" as its client id, says
// "ready" on stdout, and holds it until killed.
func TestPresenceChild(t *testing.T) {
	arg := os.Getenv(presenceChildEnv)
	if arg == "" {
		t.Skip("the child of TestPresenceAcrossServers")
	}
	endpoint, id, _ := strings.Cut(arg, " ")
	c, err := config.New(config.WithEndpoint(endpoint), config.WithClientID(id))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Namespace(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("ready\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed (or the parent goes)
	_ = c.Close()
}

// startPresenceChild starts an SDK client process of endpoint as id and
// waits for it to hold "app".
func startPresenceChild(t *testing.T, endpoint, id string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPresenceChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), presenceChildEnv+"="+endpoint+" "+id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line == "ready\n"
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the client process did not open its namespace")
		}
	case <-time.After(waitLimit):
		t.Fatal("the client process: not ready in time")
	}
	return cmd
}

// clientStates runs `holdfast clients -o json` against base and returns
// each client's state on "app".
func clientStates(t *testing.T, bin, base string) map[string]string {
	t.Helper()
	out, err := exec.Command(bin, "clients", "-o", "json", "-server", base, "app").Output()
	if err != nil {
		t.Fatalf("holdfast clients -server %s: %v", base, err)
	}
	var reply controlapi.Clients
	if err := json.Unmarshal(out, &reply); err != nil {
		t.Fatalf("holdfast clients -o json: %v\n%s", err, out)
	}
	states := make(map[string]string)
	for _, c := range reply.Clients {
		if c.State == "" || c.SDKVersion == "" {
			t.Fatalf("holdfast clients -o json: a client without its state or SDK version: %s", out)
		}
		states[c.ClientID] = c.State
	}
	return states
}

// cutter forwards TCP connections to an address until cut: then it
// closes every one and refuses new ones, as a network partition would
// to the side that dials.
type cutter struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, to string) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{l: l, to: to}
	c.wg.Add(1)
	go c.accept()
	t.Cleanup(c.close)
	return c
}

func (c *cutter) url() string { return "http://" + c.l.Addr().String() }

func (c *cutter) accept() {
	defer c.wg.Done()
	for {
		in, err := c.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", c.to)
		c.mu.Lock()
		if err != nil || c.cut {
			c.mu.Unlock()
			_ = in.Close()
			if out != nil {
				_ = out.Close()
			}
			continue
		}
		c.conns = append(c.conns, in, out)
		c.mu.Unlock()
		c.wg.Add(2)
		go func() { defer c.wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { defer c.wg.Done(); _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// partition closes every connection and refuses new ones.
func (c *cutter) partition() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cutter) close() {
	_ = c.l.Close()
	c.partition()
	c.wg.Wait()
}

// TestPresenceAcrossServers: two `holdfast server` processes over one
// etcd cluster answer alike which clients are connected. An SDK client
// process of the first and a client behind a `holdfast relay` of the
// first (through a link the test cuts) are live on both; the client
// process, SIGKILLed, is gone on both within 10 s; once the relay loses
// its upstream, its client is stale on both, not gone.
func TestPresenceAcrossServers(t *testing.T) {
	bin := buildBinary(t)
	members := startEtcd(t)
	a := startServerProc(t, bin, "-etcd", members)
	b := startServerProc(t, bin, "-etcd", members)
	if _, err := publishApp(controlClient(t, a.url(), nil), "v", 1); err != nil {
		t.Fatal(err)
	}
	link := newCutter(t, a.addr)
	r := startRelayProc(t, bin, link.url())
	behind, _ := fleetClient(t, []string{r.url()}, config.WithClientID("behind-relay"))
	openNS(t, behind, "app")
	child := startPresenceChild(t, a.url(), "killed-client")

	servers := []*relayProc{a, b}
	waitStates := func(what string, limit time.Duration, want map[string]string) time.Duration {
		t.Helper()
		start := time.Now()
		for _, s := range servers {
			var last map[string]string
			if !testutil.Wait(limit-time.Since(start), func() bool {
				last = clientStates(t, bin, s.url())
				for id, st := range want {
					if last[id] != st {
						return false
					}
				}
				return true
			}) {
				t.Fatalf("%s: server %s says %v, want %v", what, s.url(), last, want)
			}
		}
		return time.Since(start)
	}
	waitStates("connected", waitLimit, map[string]string{"killed-client": "live", "behind-relay": "live"})

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took := waitStates("SIGKILLed", 10*time.Second, map[string]string{"killed-client": "gone", "behind-relay": "live"})
	t.Logf("the SIGKILLed client was gone on both servers %v after the kill", took.Round(10*time.Millisecond))

	link.partition()
	took = waitStates("the relay cut off", waitLimit, map[string]string{"behind-relay": "stale"})
	t.Logf("the relay's client was stale on both servers %v after the cut", took.Round(10*time.Millisecond))
	if err := behind.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Log(err)
	}
	_ = r
}
