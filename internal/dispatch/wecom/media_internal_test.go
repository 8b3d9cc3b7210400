package wecom

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/media"
)

const mib = 1 << 20

func mediaJobOf(tenant, kind, url string) *job {
	return &job{Task: &channel.Task{Msg: &envelope.Message{Tenant: tenant, Media: &envelope.Media{Type: kind, URL: url}}}}
}

// Issue 43: a job comes into the pool only while its tenant, and the
// pool, have room for one more file of its kind (a job of a file already
// there shares it); else it comes back later (a snooze naming the
// setting), never dropped.
func TestMediaPoolAdmitsWithinItsBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		whole   int64
		held    map[string]int64 // bytes each tenant's files hold already
		job     *job
		snoozed string // the setting the snooze names; "" = admitted
	}{
		{"room for a file", 192 * mib, map[string]int64{"shop": 40 * mib}, mediaJobOf("shop", "file", "/f"), ""},
		{"no room for a file", 192 * mib, map[string]int64{"shop": 60 * mib}, mediaJobOf("shop", "file", "/f"), "WECOM_MEDIA_TENANT_MAX_BYTES"},
		{"no room for an image either", 192 * mib, map[string]int64{"shop": 60 * mib}, mediaJobOf("shop", "image", "/i"), "WECOM_MEDIA_TENANT_MAX_BYTES"},
		{"another tenant's share is its own", 192 * mib, map[string]int64{"shop": 64 * mib}, mediaJobOf("blog", "file", "/f"), ""},
		{"the whole is shared", 100 * mib, map[string]int64{"shop": 60 * mib, "blog": 40 * mib}, mediaJobOf("blog", "image", "/i"), "WECOM_MEDIA_MAX_BYTES"},
	} {
		p := newMediaPool(nil, 16, 4, tc.whole, 64*mib)
		var release []func()
		for tenant, n := range tc.held {
			r, err := p.holdBytes(tenant, n)
			require.NoError(t, err, tc.name)
			release = append(release, r)
		}
		err := p.reserve(tc.job)
		if tc.snoozed == "" {
			require.NoError(t, err, tc.name)
			p.unreserve(tc.job)
		} else {
			var se *channel.SnoozeError
			require.True(t, errors.As(err, &se), "%s: %v", tc.name, err)
			require.Contains(t, err.Error(), tc.snoozed, tc.name)
			require.Equal(t, mediaNone, tc.job.media, "%s: holds nothing", tc.name)
		}
		for _, r := range release {
			r()
		}
		require.Zero(t, p.bytes, tc.name)
		require.Empty(t, p.tenants, tc.name)
	}
}

// A file holds its kind's limit from its download's start (a download
// with no room waits, holding nothing), what it holds once downloaded
// (nothing for a failed download), and nothing once its last job is done;
// the jobs of one file share its bytes. Never more than the share.
func TestMediaFileBytesFollowItsDownload(t *testing.T) {
	t.Parallel()
	p := newMediaPool(nil, 16, 4, 192*mib, 64*mib)
	p.running = p.workers // no worker is started: the test plays them
	var jobs []*job
	for _, url := range []string{"/0", "/1", "/2", "/3", "/0"} {
		j := mediaJobOf("shop", "file", url)
		require.NoError(t, p.reserve(j), url)
		jobs = append(jobs, j)
	}
	require.Same(t, jobs[0].mediaFile, jobs[4].mediaFile, "one file, one download")
	require.Zero(t, p.bytes, "nothing held before a download starts")
	p.mu.Lock()
	t0 := p.tenants["shop"]
	for _, j := range jobs[:4] {
		p.queueLocked(j.mediaFile, t0)
	}
	var started []*mediaFile
	for f := p.nextLocked(); f != nil; f = p.nextLocked() {
		started = append(started, f)
	}
	require.Len(t, started, 3, "three 20 MiB downloads in a 64 MiB share")
	require.EqualValues(t, 60*mib, p.bytes)
	p.doneLocked(started[0], media.Fetched{}, errors.New("refused"))
	t0.running--
	require.EqualValues(t, 40*mib, p.bytes, "a failed download holds nothing")
	last := p.nextLocked()
	require.Same(t, jobs[3].mediaFile, last, "the waiting download starts once there is room")
	require.EqualValues(t, 60*mib, p.bytes)
	for _, f := range append(started[1:], last) {
		p.doneLocked(f, media.Fetched{}, errors.New("refused"))
		t0.running--
	}
	p.mu.Unlock()
	require.Zero(t, p.bytes)
	for _, j := range jobs {
		p.unreserve(j)
	}
	require.Zero(t, p.held)
	require.Empty(t, p.tenants)
	require.Empty(t, p.files)
}
