package cache

import (
	"testing"

	"github.com/holdfast-dev/holdfast/internal/cachedir"
)

// The public names are the codec's own: the same limit, the same sentinel.
func TestSameAsTheCodec(t *testing.T) {
	if MaxFileSize != cachedir.MaxFileSize {
		t.Errorf("MaxFileSize %d, the codec's %d", MaxFileSize, cachedir.MaxFileSize)
	}
	if ErrCorrupt != cachedir.ErrCorrupt {
		t.Error("ErrCorrupt is not the codec's sentinel")
	}
}
