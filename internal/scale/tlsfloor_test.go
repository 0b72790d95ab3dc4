//go:build scale

package scale

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/listen"
	"github.com/holdfast-dev/holdfast/internal/testutil/certtest"
)

const tlsFloorEnv = "HOLDFAST_SCALE_TLSFLOOR_URL"

// BenchmarkTLSIdleStreamFloor is the floor under a relay's memory per
// client over TLS (the target: relay RSS per client at most 1.5× it,
// measured in the same run; docs/PERFORMANCE.md, "Over TLS"): internal/listen's TLS server, as the relay's,
// holding one idle HTTP/2 stream on one TLS connection per client, its
// handler waiting and nothing else (HOLDFAST_SCALE_TLSFLOOR_STREAMS=2: two
// streams a connection, as an SDK client holds: its events' and its
// acks'). Its server-KiB/stream (a connection's) sits beside
// BenchmarkFleetRelay's relay-KiB/client under HOLDFAST_SCALE_TLS=1:
//
//	HOLDFAST_SCALE_TLS=1 go test -tags scale -run '^$' -bench 'TLSIdleStreamFloor|FleetRelay$' -benchtime 1x -timeout 60m ./internal/scale/
func BenchmarkTLSIdleStreamFloor(b *testing.B) {
	clients := envInt("HOLDFAST_SCALE_CLIENTS", 10000)
	procs := envInt("HOLDFAST_SCALE_PROCS", 2)
	ca := certtest.NewCA(b, "holdfast scale CA")
	pair := ca.Server(b, "floor")
	t, err := listen.NewTLS(pair.CertFile, pair.KeyFile, "", slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	lc := listen.Config{Addr: "127.0.0.1:0", TLS: t}
	ln, err := listen.Listen(lc)
	if err != nil {
		b.Fatal(err)
	}
	srv := listen.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}), lc)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()
	url := "https://" + ln.Addr().String() + "/idle"

	for range b.N {
		base := rss(b)
		start := time.Now()
		var kids []*childProc
		for i := range procs {
			n := clients / procs
			if i < clients%procs {
				n++
			}
			kids = append(kids, startProc(b, tlsFloorEnv+"="+url, tlsCAEnv+"="+ca.File, "HOLDFAST_SCALE_TLSFLOOR_CONNS="+strconv.Itoa(n)))
		}
		for _, k := range kids {
			expect(b, k, "connected", 10*time.Minute)
		}
		connected := rss(b)
		b.ReportMetric(float64(connected-base)/float64(clients)/1024, "server-KiB/stream")
		b.Logf("%d TLS connections of %d idle HTTP/2 streams each in %v; server RSS %d MiB before, %d MiB with them",
			clients, max(envInt("HOLDFAST_SCALE_TLSFLOOR_STREAMS", 1), 1), time.Since(start).Round(time.Millisecond), base>>20, connected>>20)
		for _, k := range kids {
			k.stop()
		}
	}
}

// tlsFloorChild opens n TLS connections to url, one idle HTTP/2 stream
// each (HOLDFAST_SCALE_TLSFLOOR_STREAMS of them: an SDK client holds two,
// its events' and its acks'), says "connected" and holds them until its
// stdin closes.
func tlsFloorChild(url string, n int, in io.Reader, out io.Writer) error {
	streams := max(envInt("HOLDFAST_SCALE_TLSFLOOR_STREAMS", 1), 1)
	pool, err := listen.LoadCertPool(os.Getenv(tlsCAEnv))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var bodies []io.Closer
	var trs []*http.Transport
	var firstErr error
	sem := make(chan struct{}, 100)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
			mu.Lock()
			trs = append(trs, tr)
			mu.Unlock()
			for range streams {
				resp, err := (&http.Client{Transport: tr}).Get(url)
				mu.Lock()
				if err != nil {
					firstErr = err
					mu.Unlock()
					return
				}
				bodies = append(bodies, resp.Body)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	fmt.Fprintln(out, "connected")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
	}
	for _, b := range bodies {
		_ = b.Close()
	}
	for _, tr := range trs {
		tr.CloseIdleConnections()
	}
	return nil
}
