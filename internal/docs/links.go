package docs

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var (
	// inlineLink matches [text](target) and ![alt](target); a title after
	// the target ("... "title"") is allowed and ignored.
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// refDef matches a reference definition: [name]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	// codeSpan matches `...` runs, whose brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// heading matches an ATX heading and captures its text.
	heading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// linkText reduces [text](target) to text inside a heading.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// proseLines returns md's lines outside fenced code blocks, each with its
// code spans blanked, so that neither contributes links or headings.
func proseLines(md string) []string {
	var out []string
	fence := ""
	for line := range strings.SplitSeq(md, "\n") {
		t := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		out = append(out, line)
	}
	return out
}

// Links returns every link target in md, in order.
func Links(md string) []string {
	var out []string
	for _, line := range proseLines(md) {
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
			continue
		}
		line = codeSpan.ReplaceAllStringFunc(line, func(s string) string { return strings.Repeat(" ", len(s)) })
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// Anchors returns the anchors GitHub gives md's headings.
func Anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(md) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		a := Slug(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Slug is GitHub's anchor for a heading's text: links reduced to their
// text, lowercased, every rune but letters, digits, '_', '-' and spaces
// dropped, spaces turned to '-'.
func Slug(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
