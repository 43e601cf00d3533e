package local

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer accepts connections on the loopback and echoes each line back, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestFrontDoor checks the door alone: it passes bytes both ways, counts its open client
// connections and when the last one went (the idle clock), closes them on closeAll, keeps its
// port while it lives, and stops accepting on close.
func TestFrontDoor(t *testing.T) {
	upstream := echoServer(t)
	d, err := openDoor("127.0.0.1", 0)
	require.NoError(t, err)
	go d.serve(func(c net.Conn) {
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			return
		}
		splice(d, c, up)
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))

	_, idle := d.idleSince()
	assert.True(t, idle, "no client yet")

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("hello\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hello\n", line, "bytes pass both ways")
	_, idle = d.idleSince()
	assert.False(t, idle, "a client is connected")

	// A client that half-closes still gets what the upstream sends after.
	_, err = c.Write([]byte("last\n"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "last\n", string(rest))
	c.Close()
	require.Eventually(t, func() bool { _, idle := d.idleSince(); return idle }, 5*time.Second, 10*time.Millisecond, "the client went")
	since, _ := d.idleSince()
	assert.WithinDuration(t, time.Now(), since, 5*time.Second, "the idle clock starts when the last client went")

	// closeAll cuts the connections passed on now; the door keeps listening.
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = c2.Write([]byte("x\n"))
	require.NoError(t, err)
	_, err = bufio.NewReader(c2).ReadString('\n')
	require.NoError(t, err)
	d.closeAll()
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c2.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "closed by closeAll")
	c2.Close()
	c3, err := net.Dial("tcp", addr)
	require.NoError(t, err, "still listening")
	c3.Close()

	// A door asked for a taken port takes another.
	other, err := openDoor("127.0.0.1", d.port)
	require.NoError(t, err)
	assert.NotEqual(t, d.port, other.port)
	other.ln.Close()

	d.close()
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "closed")
}
