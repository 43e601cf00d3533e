package local

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenDoorTakenPort: a door asked for a port another listener holds takes another (the
// cluster's endpoint moves, and the caller records the door's port).
func TestOpenDoorTakenPort(t *testing.T) {
	d, err := openDoor("127.0.0.1", 0)
	require.NoError(t, err)
	go d.Serve(func(c net.Conn) { c.Close() })
	defer d.Close()
	other, err := openDoor("127.0.0.1", d.Port())
	require.NoError(t, err)
	go other.Serve(func(c net.Conn) { c.Close() })
	defer other.Close()
	assert.NotEqual(t, d.Port(), other.Port())
}
