package listen

import (
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection, the server's
// paced; a client that will not read has a receive buffer as small as
// the kernel allows.
func tcpPair(t *testing.T, reads bool) (server *pacedConn, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client = c.(*net.TCPConn)
	t.Cleanup(func() { client.Close() })
	if !reads {
		_ = client.SetReadBuffer(1024)
	}
	s, err := pacedListener{ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	server = s.(*pacedConn)
	if server.pacer == nil {
		t.Skip("no send buffer to pace on this system")
	}
	return server, client
}

// TestSendBufferGrowsWithReads: a peer that never reads is written the
// initial buffer's worth, not a large reply; one that reads gets a buffer
// that grows to the bound.
func TestSendBufferGrowsWithReads(t *testing.T) {
	reply := make([]byte, 8<<20)

	server, _ := tcpPair(t, false)
	_ = server.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	n, err := server.Write(reply)
	if err == nil {
		t.Fatal("8 MiB written to a peer that reads nothing")
	}
	// The kernel holds twice the buffer it is given, and the client's
	// receive buffer its few KiB.
	if n > 4*InitialSendBuffer {
		t.Errorf("%d bytes accepted for a peer that reads nothing, want at most %d", n, 4*InitialSendBuffer)
	}
	if server.pacer.buf != InitialSendBuffer {
		t.Errorf("the buffer grew to %d for a peer that reads nothing", server.pacer.buf)
	}

	server, client := tcpPair(t, true)
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, client, int64(len(reply)))
		done <- err
	}()
	_ = server.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := server.Write(reply); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if server.pacer.buf < MaxSendBuffer/4 {
		t.Errorf("the buffer is %d after 8 MiB read, want at least %d", server.pacer.buf, MaxSendBuffer/4)
	}
}
