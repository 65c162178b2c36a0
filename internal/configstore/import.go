package configstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/jetway-gateway/jetway/internal/config"
)

// ImportReport counts what an import did.
type ImportReport struct {
	Created, Replaced, Unchanged int
}

// Import writes every model, tenant and user override of c (a validated
// tenants file) into the table, idempotently: a document already stored
// with the same content is left as it is, so a second import writes
// nothing. Documents in the table that c lacks are kept. Entries are
// audited with actor "import" and action "import".
func (s *Service) Import(ctx context.Context, c *config.Config) (ImportReport, error) {
	var r ImportReport
	upsert := func(key, tenant string, body []byte, put *Doc) error {
		// An import racing another (servers seeding a new table together)
		// reads the document again after a refused condition.
		for attempt := 1; ; attempt++ {
			stored, err := s.store.Get(ctx, key)
			if err != nil {
				return err
			}
			if stored != nil && bytes.Equal(stored.Body, body) {
				r.Unchanged++
				return nil
			}
			put.Body = body
			w := Write{Key: key, Put: put, Audit: Audit{Actor: "import", Action: "import", Path: key, Tenant: tenant, After: body}}
			if stored != nil {
				w.Expect, w.Audit.Before = stored.Version, stored.Body
			}
			_, err = s.store.Write(ctx, w)
			if errors.Is(err, ErrAuditLost) {
				err = nil // written; only its audit entry is missing
			}
			switch {
			case errors.Is(err, ErrStale) && attempt < 3:
				continue
			case err != nil:
				return fmt.Errorf("import %s: %w", key, err)
			case stored == nil:
				r.Created++
			default:
				r.Replaced++
			}
			return nil
		}
	}
	for i := range c.Models {
		m := c.Models[i]
		body, _ := json.Marshal(m)
		if err := upsert(ModelKey(m.ID), "", body, &Doc{}); err != nil {
			return r, err
		}
	}
	for i := range c.Tenants {
		t := c.Tenants[i]
		_, prev, err := s.storedTenant(ctx, t.ID)
		if err != nil {
			return r, err
		}
		t.Apps = append([]config.App(nil), t.Apps...)
		uids := map[string]string{}
		for j := range t.Apps {
			a := &t.Apps[j]
			a.UID = newUID()
			if prev != nil {
				for _, p := range prev.Apps {
					if p.ID == a.ID {
						a.UID = p.UID
					}
				}
			}
			uids[a.ID] = a.UID
		}
		body, _ := json.Marshal(t)
		if err := upsert(TenantKey(t.ID), t.ID, body, &Doc{UIDs: uids}); err != nil {
			return r, err
		}
		for _, a := range t.Apps {
			for _, u := range a.Users {
				body, _ := json.Marshal(u)
				if err := upsert(UserKey(t.ID, a.ID, u.Sub), t.ID, body, &Doc{AppUID: a.UID}); err != nil {
					return r, err
				}
			}
		}
	}
	_ = s.applier.Poll(ctx)
	return r, nil
}

// Export is the configuration in force as a tenants file (YAML), user
// overrides under their apps; importing it again changes nothing.
func Export(c *config.Config) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}
