package docs

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository's root, two levels up from this package.
const root = "../.."

// markdownFiles are the files whose links must resolve: the ones a reader
// of the repository lands on.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "SECURITY.md"), filepath.Join(root, "BENCHMARKS.md")}
	return append(files, docs...)
}

// Every relative link in the markdown names a file or directory that
// exists, and every #anchor a heading of the page it points to.
func TestEveryRelativeLinkResolves(t *testing.T) {
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = Anchors(string(b))
		return anchors[path]
	}
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		for _, target := range Links(string(b)) {
			if u, err := url.Parse(target); err == nil && u.Scheme != "" {
				continue // http(s), mailto: not ours to check
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				p, err := url.PathUnescape(path)
				if err != nil {
					t.Errorf("%s: link %q: %v", name, target, err)
					continue
				}
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: no such file", name, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not markdown", name, target)
				continue
			}
			if !anchorsOf(filepath.Clean(dest))[frag] {
				t.Errorf("%s: link %q: no heading with that anchor", name, target)
			}
		}
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Using it", "using-it"},
		{"The web console", "the-web-console"},
		{"5. What reading does to the queue", "5-what-reading-does-to-the-queue"},
		{"API latency (`loadgen api`, 200 req/s, 3 rounds of 10 s, open loop)", "api-latency-loadgen-api-200-reqs-3-rounds-of-10-s-open-loop"},
		{"SMS pumping blocks (`SMSPumpingSuspected`)", "sms-pumping-blocks-smspumpingsuspected"},
		{"Issues 36-39: make bench", "issues-36-39-make-bench"},
		{"API p99 at half of max: ~28–39 ms", "api-p99-at-half-of-max-2839-ms"},
		{"See [Tests](#tests) here", "see-tests-here"},
		{"snake_case and 中文", "snake_case-and-中文"},
	} {
		if got := Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestLinksAndAnchors(t *testing.T) {
	md := strings.Join([]string{
		"# Title",
		"See [a](a.md#x), ![img](p.png \"t\") and `[not](code.md)`.",
		"```",
		"[not](fenced.md)",
		"# not a heading",
		"```",
		"## Title",
		"[ref]: ref.md",
	}, "\n")
	if got, want := Links(md), []string{"a.md#x", "p.png", "ref.md"}; !slices.Equal(got, want) {
		t.Fatalf("Links = %q, want %q", got, want)
	}
	got := Anchors(md)
	if len(got) != 2 || !got["title"] || !got["title-1"] {
		t.Fatalf("Anchors = %v, want title and title-1", got)
	}
}
