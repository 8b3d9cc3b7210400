package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// decodeJSON reads exactly one JSON object from r into v, refusing unknown
// fields, trailing data and bodies over limit, with messages that say what
// is wrong and where.
func decodeJSON(r io.Reader, limit int64, v any) *apiError {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if lr.N <= 0 {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Msg: "request body larger than " + itoa(limit) + " bytes"}
	}
	if err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if lr.N <= 0 {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Msg: "request body larger than " + itoa(limit) + " bytes"}
		}
		return badRequest("unexpected data after the JSON object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("empty body: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends early")
	case errors.As(err, &syn):
		return badRequest("malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("the body must be a JSON object")
		}
		return badRequest("field %q must be %s, not %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("malformed JSON: %v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "float64", "float32", "uint8":
		return "a number"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	case "ptr":
		return "a value of the documented type"
	}
	return kind
}

// checkContentType accepts JSON bodies (and a missing Content-Type, which
// many backend HTTP clients omit); anything else is a clear 415.
func checkContentType(req *http.Request) *apiError {
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{Status: http.StatusUnsupportedMediaType, Msg: "Content-Type must be application/json, not " + ct + " (with curl: -H 'Content-Type: application/json')"}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
