//go:build tools

// Package s3server only pins the SeaweedFS module for hack/build-s3server.sh.
package s3server

import _ "github.com/seaweedfs/seaweedfs/weed"
