package store

import "testing"

// TestSearchMaxTxnOps: the probe's search finds every limit up to its cap
// exactly, etcd's default in two transactions.
func TestSearchMaxTxnOps(t *testing.T) {
	for _, limit := range []int{1, 2, 20, 127, 128, 129, 200, 256, 1000, 4096, 10000, probeCap - 1, probeCap, probeCap + 1, 1 << 20} {
		var tries int
		got, err := searchMaxTxnOps(func(n int) (bool, error) {
			tries++
			if n < 1 || n > probeCap {
				t.Fatalf("limit %d: probed %d", limit, n)
			}
			return n <= limit, nil
		})
		if want := min(limit, probeCap); err != nil || got != want {
			t.Errorf("limit %d: found %d, %v; want %d", limit, got, err, want)
		}
		if limit == 128 && tries != 2 {
			t.Errorf("etcd's default took %d transactions, want 2", tries)
		}
	}
}
