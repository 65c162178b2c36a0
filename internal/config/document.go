package config

import (
	"encoding/json"
	"errors"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// The admin API's documents (ADMIN-API.md) are the JSON form of their
// entries in the tenants file: the same keys, decoded by the same schema
// walk (unknown keys named by path), then checked by the same rules
// (CheckTenant, CheckModel, CheckUser). A document's "version" fields
// (the tenant's, each app's) are read-only and ignored in a body.

// DecodeTenant decodes a tenant document.
func DecodeTenant(data []byte) (*Tenant, error) { return decodeDocument[Tenant](data, "apps") }

// DecodeApp decodes an app document.
func DecodeApp(data []byte) (*App, error) { return decodeDocument[App](data, "") }

// DecodeModel decodes a model document.
func DecodeModel(data []byte) (*Model, error) { return decodeDocument[Model](data, "") }

// DecodeUser decodes a user override document.
func DecodeUser(data []byte) (*UserOverride, error) { return decodeDocument[UserOverride](data, "") }

// decodeDocument decodes data (JSON) into a T; nested names a list of
// subdocuments whose version fields are ignored too.
func decodeDocument[T any](data []byte, nested string) (*T, error) {
	if !json.Valid(data) {
		return nil, &Error{Problem: "the body is not a JSON document"}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &Error{Problem: decodeProblem(err)}
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil, &Error{Problem: "the body is not a JSON object"}
	}
	dropKey(doc, "version")
	if nested != "" {
		for i := 0; i+1 < len(doc.Content); i += 2 {
			if doc.Content[i].Value == nested && doc.Content[i+1].Kind == yaml.SequenceNode {
				for _, sub := range doc.Content[i+1].Content {
					dropKey(sub, "version")
				}
			}
		}
	}
	s := schemaCheck{}
	s.check("", doc, reflect.TypeFor[T]())
	if len(s.errs) > 0 {
		return nil, errors.Join(s.errs...)
	}
	var v T
	if err := doc.Decode(&v); err != nil {
		return nil, &Error{Problem: decodeProblem(err)}
	}
	return &v, nil
}

// dropKey removes key from mapping n.
func dropKey(n *yaml.Node, key string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

// Errors lists the Errors in err (one, or several joined).
func Errors(err error) []*Error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range j.Unwrap() {
			out = append(out, Errors(e)...)
		}
		return out
	}
	var one *Error
	if errors.As(err, &one) {
		return []*Error{one}
	}
	return nil
}
