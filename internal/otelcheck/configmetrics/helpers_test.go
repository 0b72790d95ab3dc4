package configmetrics_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/holdfast-dev/holdfast/internal/sdksuite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLimit = sdksuite.WaitLimit
