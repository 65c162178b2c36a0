package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a configuration file. Load, Parse and Validate
// return one Error, or several joined with errors.Join (one per line).
type Error struct {
	File    string // the file name given to Load or Parse
	Path    string // YAML path, like tenants[1].apps[0].models.default; empty for the whole file
	Problem string
}

// Error formats the problem as "file: path: problem".
func (e *Error) Error() string {
	switch {
	case e.File == "" && e.Path == "":
		return e.Problem
	case e.File == "":
		return e.Path + ": " + e.Problem
	case e.Path == "":
		return e.File + ": " + e.Problem
	}
	return e.File + ": " + e.Path + ": " + e.Problem
}

// Load reads, decodes and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates a configuration; name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	if name == "" {
		name = "config"
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Problem: "file is empty"}
		}
		return nil, &Error{File: name, Problem: syntaxProblem(data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Problem: "more than one YAML document"}
	}

	// The schema walk names the YAML path of unknown fields and bad
	// values, which the decoder's own errors (line numbers only) do not.
	s := schemaCheck{file: name}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	s.check("", doc, reflect.TypeFor[Config]())
	if len(s.errs) > 0 {
		return nil, errors.Join(s.errs...)
	}

	var c Config
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&c); err != nil {
		return nil, &Error{File: name, Problem: decodeProblem(err)}
	}
	if err := c.Validate(name); err != nil {
		return nil, err
	}
	return &c, nil
}

// decodeProblem turns a decoder error into one line, keeping its line
// numbers (the only position the decoder knows).
func decodeProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	parts := strings.Split(msg, "\n")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.Join(parts, "; ")
}

// syntaxProblem is a YAML syntax error with the line it is on. yaml.v3
// names the line where the enclosing block or flow starts, not the line
// with the problem, and no line at all for a problem on the first line or
// for some scanner errors ("mapping values are not allowed in this
// context"). The problem's line is the first one at which the file, cut
// after it, fails with the same error.
func syntaxProblem(data []byte, err error) string {
	problem := yamlLinePrefix.ReplaceAllString(err.Error(), "")
	end := 0
	for i, line := range bytes.SplitAfter(data, []byte("\n")) {
		end += len(line)
		var n yaml.Node
		if e := yaml.Unmarshal(data[:end], &n); e != nil && yamlLinePrefix.ReplaceAllString(e.Error(), "") == problem {
			return fmt.Sprintf("line %d: %s", i+1, problem)
		}
	}
	return decodeProblem(err)
}

// schemaCheck walks a YAML node tree alongside the Go types it decodes
// into, collecting path-named errors.
type schemaCheck struct {
	file string
	errs []error
}

var (
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	yamlLinePrefix  = regexp.MustCompile(`^(yaml: )?(unmarshal errors:\s*)?(line \d+: )?`)
)

func (s *schemaCheck) add(path, format string, args ...any) {
	s.errs = append(s.errs, &Error{File: s.file, Path: path, Problem: fmt.Sprintf(format, args...)})
}

func (s *schemaCheck) check(path string, n *yaml.Node, t reflect.Type) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // null leaves the zero value, which means "default"
	}
	pt := reflect.PointerTo(t)
	if pt.Implements(yamlUnmarshaler) || pt.Implements(textUnmarshaler) || isScalar(t.Kind()) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			s.add(path, "%s", yamlLinePrefix.ReplaceAllString(err.Error(), ""))
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		s.check(path, n, t.Elem())
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			s.add(path, "expected a mapping, got %s", describe(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				s.add(p, "unknown field %q (line %d; known fields: %s)", k.Value, k.Line, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
				continue
			}
			s.check(p, v, ft)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			s.add(path, "expected a list, got %s", describe(n))
			return
		}
		for i, c := range n.Content {
			s.check(fmt.Sprintf("%s[%d]", path, i), c, t.Elem())
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			s.add(path, "expected a mapping, got %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			s.check(joinPath(path, k.Value), v, t.Elem())
		}
	default:
		s.add(path, "unsupported type %s", t)
	}
}

func isScalar(k reflect.Kind) bool {
	switch k {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
