package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that a closed Server leaves no goroutine behind: its
// watch cache, its trimmer, its etcd client and its embedded etcd.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
