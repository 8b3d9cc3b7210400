// Package fraudtest blocks a prefix the way the API does (codes to it
// through the limiter until the guard refuses one, the block listed), for
// the tests of what lists and lifts blocks. Only _test.go files may import
// it. It never fakes Redis: the block is the guard's own.
package fraudtest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// Block sends never-verified codes to number's prefix for tenant through
// lim until g blocks it, lists the block, and returns the guard of the
// prefix (for more Takes) and the refusal that began the block.
func Block(t testing.TB, ctx context.Context, g *fraud.Guard, lim *ratelimit.Limiter, tenant, number string) (*ratelimit.Guard, *ratelimit.GuardError) {
	t.Helper()
	n, err := phone.Parse(number)
	require.NoError(t, err)
	w, prefix := g.Watch(tenant, n)
	require.NotNil(t, w, "the guard is off")
	for range 100_000 {
		_, err := lim.Take(ctx, ratelimit.Request{Guard: w})
		var ge *ratelimit.GuardError
		if errors.As(err, &ge) {
			require.NoError(t, g.Refused(ctx, tenant, prefix, ge))
			return w, ge
		}
		require.NoError(t, err)
	}
	t.Fatalf("fraudtest: %s's prefix of %s never blocked", tenant, number)
	return nil, nil
}
