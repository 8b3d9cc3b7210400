package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DecodeLogLine decodes one JSON log line into its top-level fields. It
// fails on a key that appears twice in one object, at any depth, which
// encoding/json accepts silently (the last value wins) and Elasticsearch
// refuses (issue 38): the decoder walks the line's tokens itself.
func DecodeLogLine(line []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object: starts with %v", tok)
	}
	out := map[string]any{}
	if err := walkObject(d, "", out); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more after the object")
	}
	return out, nil
}

// walkObject reads an object's members after its '{', refusing a key seen
// before in it; into, when not nil, gets the members' values.
func walkObject(d *json.Decoder, path string, into map[string]any) error {
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("duplicate key %q", path+key)
		}
		seen[key] = true
		v, err := walkValue(d, path+key+".")
		if err != nil {
			return err
		}
		if into != nil {
			into[key] = v
		}
	}
	_, err := d.Token() // '}'
	return err
}

// walkValue reads one value, checking the objects in it.
func walkValue(d *json.Decoder, path string) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		return m, walkObject(d, path, m)
	case json.Delim('['):
		var a []any
		for i := 0; d.More(); i++ {
			v, err := walkValue(d, fmt.Sprintf("%s%d.", path, i))
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token() // ']'
		return a, err
	}
	return tok, nil
}

// LogLines decodes every line of out that is a JSON object with
// DecodeLogLine (lines that do not start with '{', a Go panic or a
// shell's message, are skipped and returned apart). The first line with a
// duplicate key, or that is not JSON, is an error naming it.
func LogLines(out string) (lines []map[string]any, other []string, err error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Bytes()
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("{")) {
			if len(bytes.TrimSpace(l)) > 0 {
				other = append(other, string(l))
			}
			continue
		}
		m, err := DecodeLogLine(l)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w: %s", n, err, l)
		}
		lines = append(lines, m)
	}
	return lines, other, sc.Err()
}
