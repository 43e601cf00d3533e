package frontdoor

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"sync"
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
	d, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	var changes []int64
	var mu sync.Mutex
	d.OnChange(func(open int64) { mu.Lock(); changes = append(changes, open); mu.Unlock() })
	go d.Serve(func(c net.Conn) {
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			return
		}
		d.Splice(c, up)
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.Port()))

	_, idle := d.IdleSince()
	assert.True(t, idle, "no client yet")

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	r := bufio.NewReader(c)
	_, err = c.Write([]byte("hello\n"))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hello\n", line, "bytes pass both ways")
	_, idle = d.IdleSince()
	assert.False(t, idle, "a client is connected")
	assert.EqualValues(t, 1, d.Open())

	// A client that half-closes still gets what the upstream sends after.
	_, err = c.Write([]byte("last\n"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "last\n", string(rest))
	c.Close()
	require.Eventually(t, func() bool { _, idle := d.IdleSince(); return idle }, 5*time.Second, 10*time.Millisecond, "the client went")
	since, _ := d.IdleSince()
	assert.WithinDuration(t, time.Now(), since, 5*time.Second, "the idle clock starts when the last client went")

	// closeAll cuts the connections passed on now; the door keeps listening.
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = c2.Write([]byte("x\n"))
	require.NoError(t, err)
	_, err = bufio.NewReader(c2).ReadString('\n')
	require.NoError(t, err)
	d.CloseAll()
	require.NoError(t, c2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c2.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF, "closed by closeAll")
	c2.Close()
	require.Eventually(t, func() bool { return d.Open() == 0 }, 5*time.Second, 10*time.Millisecond, "closeAll's client went")
	c3, err := net.Dial("tcp", addr)
	require.NoError(t, err, "still listening")
	require.Eventually(t, func() bool { return d.Open() == 1 }, 5*time.Second, 10*time.Millisecond, "a new client after closeAll")
	c3.Close()

	require.Eventually(t, func() bool { return d.Open() == 0 }, 5*time.Second, 10*time.Millisecond)
	d.Close()
	_, err = net.Dial("tcp", addr)
	assert.Error(t, err, "no longer listening")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int64{1, 0, 1, 0, 1, 0}, changes, "every open and close reported, in order")
}
