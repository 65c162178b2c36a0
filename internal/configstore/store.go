// Package configstore keeps the configuration as data: tenants (with
// their apps), user overrides and the model catalogue as versioned
// documents in a DynamoDB config table (JETWAY_CONFIG_TABLE), and applies
// every change on every server within seconds (Applier) while keeping the
// last good copy when the table cannot be read.
//
// The table has the shape of Jetway's others (a string partition key pk,
// a TTL attribute). Its items:
//
//	head                      {seq}: the number of the last change announced
//	chg#<seq>                 {key, version, at_ms, void?}: change seq touches key
//	tenant#<id>               {doc, uids, version}: a tenant and its apps (JSON)
//	model#<id>                {doc, version}
//	user#<tenant>#<app>#<sub> {doc, app_uid, version}
//	audit#<seq>               {audit_all, audit_tenant, audit_at, actor, action, path, before, after}
//
// A write takes the next seq (one UpdateItem on head), announces it
// (chg#<seq>, naming the key and the version it will write), then writes
// the document under a condition on the version it replaces, and records
// the audit entry. Every call is a single-item write: no transactions,
// so it runs unchanged on DynamoDB and dynalite. A version is the seq of
// the change that wrote it, as a string. A reader that saw head move
// reads the announcements after its own seq, in order, and reads each
// named document again (see Applier): a document is announced before it
// is written, so no change goes unseen, and a write refused by its
// condition marks its announcement void.
package configstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Attributes and keys of the config table.
const (
	attrSeq         = "seq"
	attrKey         = "key"
	attrVersion     = "version"
	attrAt          = "at_ms"
	attrVoid        = "void"
	attrDelete      = "delete"
	attrDoc         = "doc"
	attrUIDs        = "uids"
	attrAppUID      = "app_uid"
	attrExpires     = "expires_at"
	attrAuditAll    = "audit_all"
	attrAuditTenant = "audit_tenant"
	attrAuditAt     = "audit_at"
	headKey         = "head"
	// IndexAuditTenant and IndexAuditAll are the audit trail's indexes.
	IndexAuditTenant = "audit_tenant"
	IndexAuditAll    = "audit_all"
	// ChangeRetention is how long an announcement is kept: a server whose
	// reads fail for longer than this reloads the whole table.
	ChangeRetention = 24 * time.Hour
	// AuditRetention is how long an audit entry is kept.
	AuditRetention = 400 * 24 * time.Hour
	// MaxDocumentBytes bounds a stored document: a DynamoDB item holds at
	// most 400 KB with its other attributes.
	MaxDocumentBytes = 350 << 10
	// auditAttempts bounds the tries of an audit entry after its write.
	auditAttempts = 3
)

// Errors of the store. ErrUnavailable wraps anything the table answered
// other than a refused condition.
var (
	ErrStale       = errors.New("configstore: the document's version is not the one expected")
	ErrUnavailable = errors.New("configstore: the config table cannot be reached")
	ErrTooLarge    = errors.New("configstore: the document is over the stored bound")
	// ErrAuditLost: the document was written, its audit entry was not
	// (after auditAttempts tries); Write's version is the stored one.
	ErrAuditLost = errors.New("configstore: the audit entry could not be written")
)

// Keys of the documents.
func TenantKey(id string) string             { return "tenant#" + id }
func ModelKey(id string) string              { return "model#" + id }
func UserKey(tenant, app, sub string) string { return "user#" + tenant + "#" + app + "#" + sub }

// Store is the config table.
type Store struct {
	table *dynamotable.Table
	now   func() time.Time
}

// NewStore returns the store on table (see CreateTable).
func NewStore(client *dynamodb.Client, table string) *Store {
	return &Store{table: dynamotable.NewTable(client, table, dynamotable.TableConfig), now: time.Now}
}

// SetObserver reports every call to obs (table role "config").
func (s *Store) SetObserver(obs dynamotable.Observer) { s.table.SetObserver(obs) }

// CreateTable makes the config table with its audit indexes, idempotently
// (`gateway tables create`; production tables come from Terraform).
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	return dynamotable.Create(ctx, client, table, dynamotable.PK, attrExpires,
		dynamotable.Index{Name: IndexAuditTenant, Hash: attrAuditTenant, Range: attrAuditAt,
			HashType: types.ScalarAttributeTypeS, RangeType: types.ScalarAttributeTypeS},
		dynamotable.Index{Name: IndexAuditAll, Hash: attrAuditAll, Range: attrAuditAt,
			HashType: types.ScalarAttributeTypeS, RangeType: types.ScalarAttributeTypeS})
}

// Doc is one stored document.
type Doc struct {
	Key     string
	Version string
	Body    []byte            // the document's JSON
	UIDs    map[string]string // a tenant's apps' incarnations
	AppUID  string            // a user override's app incarnation
}

func decodeDoc(item dynamotable.Item) *Doc {
	if item == nil {
		return nil
	}
	d := &Doc{Key: dynamotable.String(item, dynamotable.PK), Version: dynamotable.String(item, attrVersion),
		Body: []byte(dynamotable.String(item, attrDoc)), AppUID: dynamotable.String(item, attrAppUID)}
	if m := dynamotable.Map(item, attrUIDs); m != nil {
		d.UIDs = make(map[string]string, len(m))
		for k := range m {
			d.UIDs[k] = dynamotable.String(m, k)
		}
	}
	return d
}

// Get reads one document, strongly consistent; nil when absent.
func (s *Store) Get(ctx context.Context, key string) (*Doc, error) {
	item, err := s.table.Get(ctx, "get", key, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return decodeDoc(item), nil
}

// Head is the seq of the last change announced (0 for a new table).
func (s *Store) Head(ctx context.Context) (int64, error) {
	item, err := s.table.Get(ctx, "head", headKey, true)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	n, _ := dynamotable.Int(item, attrSeq)
	return n, nil
}

// Change is one announcement.
type Change struct {
	Seq     int64
	Key     string
	Version string
	At      time.Time
	Delete  bool // the write deletes Key
	Void    bool
}

// Change reads announcement seq; nil when it is not (yet) there.
func (s *Store) Change(ctx context.Context, seq int64) (*Change, error) {
	item, err := s.table.Get(ctx, "change", changeKey(seq), true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if item == nil {
		return nil, nil
	}
	at, _ := dynamotable.Int(item, attrAt)
	return &Change{Seq: seq, Key: dynamotable.String(item, attrKey), Version: dynamotable.String(item, attrVersion),
		At: time.UnixMilli(at), Delete: dynamotable.Bool(item, attrDelete), Void: dynamotable.Bool(item, attrVoid)}, nil
}

func changeKey(seq int64) string { return "chg#" + strconv.FormatInt(seq, 10) }

// Scan reads every document (tenants, models, user overrides) and the
// head as it was before the scan began, so announcements after it replay
// what the scan may have missed.
func (s *Store) Scan(ctx context.Context) (head int64, docs []*Doc, err error) {
	if head, err = s.Head(ctx); err != nil {
		return 0, nil, err
	}
	err = s.table.Scan(ctx, "scan", func(items []dynamotable.Item) {
		for _, it := range items {
			k := dynamotable.String(it, dynamotable.PK)
			if strings.HasPrefix(k, "tenant#") || strings.HasPrefix(k, "model#") || strings.HasPrefix(k, "user#") {
				docs = append(docs, decodeDoc(it))
			}
		}
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return head, docs, nil
}

// Write is one document write: Put (nil: delete) replaces the document
// at Key when its version is Expect ("" : only when there is none).
type Write struct {
	Key    string
	Expect string
	Put    *Doc // Body, UIDs, AppUID; Key and Version are set by Write
	Audit  Audit
}

// Audit is one entry of the audit trail.
type Audit struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"` // create, replace, delete, import
	Path   string    `json:"path"`
	Tenant string    `json:"-"` // "" for the model catalogue
	Before []byte    `json:"-"`
	After  []byte    `json:"-"`
}

// Write stores w and returns the new version (ErrStale when the stored
// version is not w.Expect; nothing is written then).
func (s *Store) Write(ctx context.Context, w Write) (string, error) {
	if w.Put != nil && len(w.Put.Body) > MaxDocumentBytes {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(w.Put.Body), MaxDocumentBytes)
	}
	if w.Put == nil && w.Expect == "" {
		return "", fmt.Errorf("configstore: a delete of %s needs the version it deletes", w.Key)
	}
	u := dynamotable.NewUpdate(headKey).Name("#seq", attrSeq).Value(":one", dynamotable.N(1)).Add("#seq :one")
	u.Return = types.ReturnValueUpdatedNew
	out, err := s.table.Update(ctx, "seq", u)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	seq, _ := dynamotable.Int(out, attrSeq)
	version := strconv.FormatInt(seq, 10)
	now := s.now()
	if err := s.table.Put(ctx, "announce", dynamotable.Item{dynamotable.PK: dynamotable.S(changeKey(seq)),
		attrKey: dynamotable.S(w.Key), attrVersion: dynamotable.S(version), attrAt: dynamotable.N(now.UnixMilli()),
		attrExpires: dynamotable.N(now.Add(ChangeRetention).Unix()), attrDelete: dynamotable.BOOL(w.Put == nil)}, "", nil, nil); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cond, names, values := "attribute_not_exists(#pk)", map[string]string{"#pk": dynamotable.PK}, dynamotable.Item(nil)
	if w.Expect != "" {
		cond, names, values = "#v = :v", map[string]string{"#v": attrVersion}, dynamotable.Item{":v": dynamotable.S(w.Expect)}
	}
	if w.Put != nil {
		item := dynamotable.Item{dynamotable.PK: dynamotable.S(w.Key), attrVersion: dynamotable.S(version),
			attrDoc: dynamotable.S(string(w.Put.Body))}
		if w.Put.UIDs != nil {
			m := dynamotable.Item{}
			for k, v := range w.Put.UIDs {
				m[k] = dynamotable.S(v)
			}
			item[attrUIDs] = dynamotable.M(m)
		}
		if w.Put.AppUID != "" {
			item[attrAppUID] = dynamotable.S(w.Put.AppUID)
		}
		err = s.table.Put(ctx, "put", item, cond, names, values)
	} else {
		err = s.table.Delete(ctx, "delete", w.Key, cond, names, values)
	}
	if _, refused := dynamotable.Refused(err); refused {
		s.void(ctx, seq)
		return "", ErrStale
	}
	if err != nil {
		if dynamotable.TooLarge(err) {
			s.void(ctx, seq)
			return "", fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	w.Audit.At = now
	var err2 error
	for attempt := 0; attempt < auditAttempts; attempt++ {
		if err2 = s.audit(ctx, seq, w.Audit); err2 == nil {
			return version, nil
		}
	}
	return version, fmt.Errorf("%w: %s written as version %s: %w", ErrAuditLost, w.Key, version, err2)
}

// void marks announcement seq as not written (best effort: a reader
// gives up on an announcement whose version never appears, see Applier).
func (s *Store) void(ctx context.Context, seq int64) {
	u := dynamotable.NewUpdate(changeKey(seq)).SetValue(attrVoid, dynamotable.BOOL(true))
	_, _ = s.table.Update(ctx, "void", u)
}

// auditScopeAll is the partition of the whole trail's index.
const auditScopeAll = "all"

func (s *Store) audit(ctx context.Context, seq int64, a Audit) error {
	tenant := a.Tenant
	if tenant == "" {
		tenant = "_"
	}
	item := dynamotable.Item{
		dynamotable.PK:  dynamotable.S("audit#" + strconv.FormatInt(seq, 10)),
		attrAuditAll:    dynamotable.S(auditScopeAll),
		attrAuditTenant: dynamotable.S(tenant),
		attrAuditAt:     dynamotable.S(auditAt(a.At, seq)),
		"actor":         dynamotable.S(a.Actor),
		"action":        dynamotable.S(a.Action),
		"path":          dynamotable.S(a.Path),
		attrExpires:     dynamotable.N(a.At.Add(AuditRetention).Unix()),
	}
	if a.Before != nil {
		item["before"] = dynamotable.S(string(a.Before))
	}
	if a.After != nil {
		item["after"] = dynamotable.S(string(a.After))
	}
	if err := s.table.Put(ctx, "audit", item, "", nil, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// auditAt orders entries by time, then by seq.
func auditAt(t time.Time, seq int64) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z") + "#" + fmt.Sprintf("%020d", seq)
}

// AuditQuery selects entries: of Tenant ("" for every entry), since
// Since, newest first, at most Limit, after the page token After.
type AuditQuery struct {
	Tenant string
	Since  time.Time
	After  string
	Limit  int32
}

// AuditEntries reads one page of the trail and the next page's token ("" at the end).
func (s *Store) AuditEntries(ctx context.Context, q AuditQuery) ([]Audit, string, error) {
	index, hash, value := IndexAuditAll, attrAuditAll, auditScopeAll
	if q.Tenant != "" {
		index, hash, value = IndexAuditTenant, attrAuditTenant, q.Tenant
	}
	cond := "#h = :h AND #at >= :since"
	values := dynamotable.Item{":h": dynamotable.S(value), ":since": dynamotable.S(auditAt(q.Since, 0))}
	if q.After != "" {
		cond = "#h = :h AND #at BETWEEN :since AND :after"
		values[":after"] = dynamotable.S(q.After)
	}
	in := &dynamodb.QueryInput{IndexName: aws.String(index), KeyConditionExpression: aws.String(cond),
		ExpressionAttributeNames: map[string]string{"#h": hash, "#at": attrAuditAt}, ExpressionAttributeValues: values,
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(q.Limit + 1)}
	items, err := s.table.QueryPage(ctx, "audit_query", in)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var keys, ats []string
	for _, it := range items {
		if at := dynamotable.String(it, attrAuditAt); at != q.After {
			keys, ats = append(keys, dynamotable.String(it, dynamotable.PK)), append(ats, at)
		}
	}
	next := ""
	if len(keys) > int(q.Limit) {
		keys, next = keys[:q.Limit], ats[q.Limit-1]
	}
	out := make([]Audit, 0, len(keys))
	for _, k := range keys {
		item, err := s.table.Get(ctx, "audit_get", k, false)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if item == nil {
			continue
		}
		at, _, _ := strings.Cut(dynamotable.String(item, attrAuditAt), "#")
		t, _ := time.Parse("2006-01-02T15:04:05.000000Z", at)
		a := Audit{At: t, Actor: dynamotable.String(item, "actor"), Action: dynamotable.String(item, "action"),
			Path: dynamotable.String(item, "path"), Tenant: dynamotable.String(item, attrAuditTenant)}
		if v, ok := item["before"]; ok && v != nil {
			a.Before = []byte(dynamotable.String(item, "before"))
		}
		if v, ok := item["after"]; ok && v != nil {
			a.After = []byte(dynamotable.String(item, "after"))
		}
		out = append(out, a)
	}
	return out, next, nil
}
