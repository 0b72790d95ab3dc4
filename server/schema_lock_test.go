package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testutil"
	"github.com/holdfast-dev/holdfast/server/store"
)

// TestSchemaCompileDelaysNoOtherNamespace: the first publish after a
// schema is stored compiles it, and a publish to another namespace meanwhile
// does not wait for that: compilation holds no server-wide lock. (It
// held the schema cache's: a schema 3,000 deep made a publish to an
// unrelated namespace wait 6.9 s.)
func TestSchemaCompileDelaysNoOtherNamespace(t *testing.T) {
	_, base := startServer(t, store.Config{Kind: store.KindMemory})
	publish(t, base, "other", map[string]any{"v": 0})
	sch := testutil.CostlySchema()
	cc := controlClient(t, base)
	var ratios []string
	for try := range 5 {
		// A new revision of the key: the next publish compiles it.
		if err := cc.PutSchema(context.Background(), "costly", json.RawMessage(sch)); err != nil {
			t.Fatalf("PUT the schema: %v", err)
		}
		var costly time.Duration
		var costlyErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			start := time.Now()
			resp, err := http.Post(base+"/control/namespaces/costly/publish", "application/json", strings.NewReader(`{"puts":{"k0":[]}}`))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			costly, costlyErr = time.Since(start), err
		})
		time.Sleep(20 * time.Millisecond) // the compilation under way
		start := time.Now()
		publish(t, base, "other", map[string]any{"v": try})
		other := time.Since(start)
		wg.Wait()
		if costlyErr != nil {
			t.Fatalf("the publish to the namespace of the schema: %v", costlyErr)
		}
		// Waiting for the compilation, the other publish would take about
		// as long as the costly one, less the 20 ms.
		if other < costly/2 {
			return
		}
		ratios = append(ratios, fmt.Sprintf("%v while %v", other, costly))
	}
	t.Errorf("a publish to another namespace waited for a schema's compilation in each try: %s", strings.Join(ratios, "; "))
}
