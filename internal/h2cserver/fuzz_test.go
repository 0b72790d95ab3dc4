package h2cserver

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzConn sends arbitrary bytes after a client's preface and SETTINGS,
// over an in-memory connection (a TCP one each would run the ports out),
// then hangs up: whatever the bytes, the server must not panic or hang,
// and must end the connection (go test -fuzz FuzzConn).
func FuzzConn(f *testing.F) {
	for _, seed := range connSeeds() {
		f.Add(seed)
	}
	ended := make(chan struct{}, 1)
	s := New(&http.Server{
		ErrorLog: discardLog(),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				ended <- struct{}{}
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			w.Header().Set("X-Len", string(rune('0'+len(b)%10)))
			_, _ = w.Write(b)
		}),
	})
	// The listener the HTTP/1 side uses: it hands Serve what deliver gets.
	ln := newConnListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	go func() { _ = s.Serve(ln) }()
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		ln.deliver(server)
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, client)
		}()
		_ = client.SetWriteDeadline(time.Now().Add(10 * time.Second))
		hello := append([]byte(preface), frame(0x4, 0, 0, nil)...)
		_, _ = client.Write(append(hello, data...)) // fails once the server hangs up
		_ = client.Close()
		<-drained
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not end the connection")
		}
	})
}

// connSeeds are frame sequences a client sends, and some it must not.
func connSeeds() [][]byte {
	var out [][]byte
	add := func(write func(fr *http2.Framer, enc func(...string) []byte)) {
		var buf, hb bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		henc := hpack.NewEncoder(&hb)
		enc := func(fields ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(fields); i += 2 {
				_ = henc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
			}
			return append([]byte(nil), hb.Bytes()...)
		}
		write(fr, enc)
		out = append(out, buf.Bytes())
	}
	post := []string{":method", "POST", ":scheme", "http", ":authority", "x", ":path", "/p"}
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(getFields...), EndStream: true, EndHeaders: true})
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(post...), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hello"))
		_ = fr.WriteDataPadded(1, true, []byte("world"), make([]byte, 7))
		_ = fr.WriteWindowUpdate(0, 1000)
		_ = fr.WriteWindowUpdate(1, 1000)
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20})
		block := enc(post...)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block[:2], EndHeaders: false})
		_ = fr.WriteContinuation(3, true, block[2:])
		_ = fr.WriteData(3, false, bytes.Repeat([]byte("x"), 300))
		_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	})
	add(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(post...), EndHeaders: true})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("x-trailer", "1"), EndStream: true, EndHeaders: true})
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 3})
		_ = fr.WriteRawFrame(0xfa, 0, 0, []byte("unknown type"))
	})
	out = append(out, []byte("not a frame at all, but bytes"), nil)
	return out
}
