package dispatch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/media"
)

func mediaJobOf(tenant, kind, url string) *job {
	return &job{msg: &envelope.Message{Tenant: tenant, Media: &envelope.Media{Type: kind, URL: url}}}
}

// Issue 43: the pool reserves a file's bytes (its kind's limit) with its
// first job, before the download; a job of the same file shares them; a
// job beyond its tenant's share, or the whole, comes back later (a
// snooze naming the setting), never dropped; the bytes come back with the
// file's last job.
func TestMediaPoolHoldsBoundedBytes(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		whole     int64
		jobs      []*job
		snoozed   map[int]string // job index → the setting its snooze names
		wantBytes int64
	}{
		{"a tenant holds its share, no more", 256 * mib, []*job{
			mediaJobOf("shop", "file", "/0"), mediaJobOf("shop", "file", "/1"), mediaJobOf("shop", "file", "/2"), mediaJobOf("shop", "file", "/3"),
			mediaJobOf("shop", "file", "/4"), mediaJobOf("shop", "image", "/5"),
		}, map[int]string{4: "WECOM_MEDIA_TENANT_MAX_BYTES", 5: "WECOM_MEDIA_TENANT_MAX_BYTES"}, 80 * mib},
		{"another tenant still has room", 256 * mib, []*job{
			mediaJobOf("shop", "file", "/0"), mediaJobOf("shop", "file", "/1"), mediaJobOf("shop", "file", "/2"), mediaJobOf("shop", "file", "/3"),
			mediaJobOf("shop", "file", "/4"), mediaJobOf("blog", "file", "/0"),
		}, map[int]string{4: "WECOM_MEDIA_TENANT_MAX_BYTES"}, 100 * mib},
		{"the jobs of one file share its bytes", 256 * mib, []*job{
			mediaJobOf("shop", "file", "/same"), mediaJobOf("shop", "file", "/same"), mediaJobOf("shop", "file", "/same"),
			mediaJobOf("shop", "image", "/same"), mediaJobOf("blog", "file", "/same"),
		}, nil, 50 * mib},
		{"the whole is shared", 100 * mib, []*job{
			mediaJobOf("shop", "file", "/0"), mediaJobOf("shop", "file", "/1"), mediaJobOf("shop", "file", "/2"), mediaJobOf("shop", "file", "/3"),
			mediaJobOf("blog", "file", "/0"), mediaJobOf("blog", "image", "/1"),
		}, map[int]string{5: "WECOM_MEDIA_MAX_BYTES"}, 100 * mib},
	} {
		p := newMediaPool(nil, 16, 4, tc.whole, 80*mib)
		for i, j := range tc.jobs {
			err := p.reserve(j)
			want, snoozed := tc.snoozed[i]
			if !snoozed {
				require.NoError(t, err, "%s: job %d", tc.name, i)
				continue
			}
			var se *SnoozeError
			require.True(t, errors.As(err, &se), "%s: job %d: %v", tc.name, i, err)
			require.Contains(t, err.Error(), want, "%s: job %d", tc.name, i)
			require.Equal(t, mediaNone, j.media, "%s: job %d holds nothing", tc.name, i)
		}
		require.Equal(t, tc.wantBytes, p.bytes, tc.name)
		require.LessOrEqual(t, p.bytes, tc.whole, tc.name)
		for _, tm := range p.tenants {
			require.LessOrEqual(t, tm.bytes, p.tenantBytes, tc.name)
		}
		for _, j := range tc.jobs {
			p.unreserve(j)
		}
		require.Zero(t, p.bytes, tc.name)
		require.Zero(t, p.held, tc.name)
		require.Empty(t, p.tenants, tc.name)
		require.Empty(t, p.files, tc.name)
	}
}

// A file's reservation becomes what it holds once downloaded (nothing for
// a failed download), and stays until its last job: a job submitted after
// the download goes on with the file, not a new download.
func TestMediaFileBytesFollowItsJobs(t *testing.T) {
	t.Parallel()
	p := newMediaPool(nil, 16, 4, 256<<20, 80<<20)
	a, b := mediaJobOf("shop", "file", "/f"), mediaJobOf("shop", "file", "/f")
	require.NoError(t, p.reserve(a))
	require.NoError(t, p.reserve(b))
	require.EqualValues(t, media.MaxFileBytes, p.bytes, "one file, reserved at its kind's limit")
	f := a.mediaFile
	p.mu.Lock()
	jobs := p.doneLocked(f, media.Fetched{}, fmt.Errorf("refused"))
	p.mu.Unlock()
	require.Empty(t, jobs, "none submitted yet")
	require.Zero(t, p.bytes, "a failed download holds nothing")
	require.NotContains(t, p.files, f.key, "a job of the same file from now on downloads it anew")
	c := mediaJobOf("shop", "file", "/f")
	require.NoError(t, p.reserve(c))
	require.NotSame(t, f, c.mediaFile)
	require.EqualValues(t, media.MaxFileBytes, p.bytes)
	for _, j := range []*job{a, b, c} {
		p.unreserve(j)
	}
	require.Zero(t, p.bytes)
	require.Empty(t, p.tenants)
}
