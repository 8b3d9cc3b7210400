package template

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// WeCom formats beyond text and markdown: a textcard (title, description,
// a link) and a news message (one article: title, description, link).
const (
	FormatTextCard = "textcard"
	FormatNews     = "news"
)

// parseCard reads a rendered wecom.txt of a textcard or news template:
//
//	title: the title
//	url: https://…
//	description: the rest of the text,
//	which may take several lines
//
// title and url are one line each; description runs to the end.
func parseCard(s string) (title, description, link string, err error) {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "title":
			title = value
		case "url":
			link = value
		case "description":
			description = strings.TrimSpace(strings.Join(append([]string{value}, lines[i+1:]...), "\n"))
			return finishCard(title, description, link)
		}
	}
	return finishCard(title, description, link)
}

func finishCard(title, description, link string) (string, string, string, error) {
	if title == "" || description == "" || link == "" {
		return "", "", "", errors.New("a textcard or news wecom.txt needs lines title:, url: and description: (last), none empty")
	}
	u, err := url.Parse(link)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", "", fmt.Errorf("url %q is not an http(s) URL", link)
	}
	return title, description, link, nil
}
