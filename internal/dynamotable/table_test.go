package dynamotable_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jetway-gateway/jetway/internal/dynalitetest"
	"github.com/jetway-gateway/jetway/internal/dynamotable"
)

// Every value the codec writes reads back; an absent or mistyped attribute
// reads as the zero value.
func TestValuesRoundTrip(t *testing.T) {
	item := dynamotable.Item{
		"s": dynamotable.S("text"), "n": dynamotable.N(-42), "b": dynamotable.B([]byte{1, 2}),
		"t": dynamotable.BOOL(true), "l": dynamotable.L([]string{"a", "", "c"}), "e": dynamotable.L(nil),
		"m":    dynamotable.M(dynamotable.Item{"x": dynamotable.N(7)}),
		"null": &types.AttributeValueMemberNULL{Value: true},
	}
	n, ok := dynamotable.Int(item, "n")
	x, _ := dynamotable.Int(dynamotable.Map(item, "m"), "x")
	if dynamotable.String(item, "s") != "text" || !ok || n != -42 || string(dynamotable.Bytes(item, "b")) != "\x01\x02" ||
		!dynamotable.Bool(item, "t") || !slices.Equal(dynamotable.Strings(item, "l"), []string{"a", "", "c"}) || x != 7 {
		t.Errorf("read back %v", item)
	}
	if _, ok := dynamotable.Int(item, "s"); ok || dynamotable.String(item, "n") != "" || dynamotable.Bytes(item, "absent") != nil ||
		dynamotable.Bool(item, "s") || dynamotable.Strings(item, "e") != nil || dynamotable.Strings(item, "null") != nil ||
		dynamotable.Map(item, "s") != nil {
		t.Error("an absent or mistyped attribute did not read as zero")
	}
	if string(dynamotable.Bytes(dynamotable.Item{"s": dynamotable.S("frame")}, "s")) != "frame" {
		t.Error("Bytes does not read a string attribute")
	}
}

// Input joins the clauses in one expression with named placeholders.
func TestUpdateInput(t *testing.T) {
	u := dynamotable.NewUpdate("k").SetValue("state", dynamotable.S("done")).Name("#used", "used").Value(":used", dynamotable.N(3)).Add("#used :used").
		RemoveAttr("cancel").Set("#state2 = :state").Name("#state2", "state2").
		If("attribute_not_exists(#used) OR #used <= :max").Value(":max", dynamotable.N(10)).If("#state = :state")
	in := u.Input("tbl")
	if got, want := aws.ToString(in.UpdateExpression), "SET #state = :state, #state2 = :state ADD #used :used REMOVE #cancel"; got != want {
		t.Errorf("update %q, want %q", got, want)
	}
	if got, want := aws.ToString(in.ConditionExpression), "(attribute_not_exists(#used) OR #used <= :max) AND (#state = :state)"; got != want {
		t.Errorf("condition %q, want %q", got, want)
	}
	if aws.ToString(in.TableName) != "tbl" || dynamotable.String(in.Key, dynamotable.PK) != "k" || len(in.ExpressionAttributeNames) != 4 ||
		len(in.ExpressionAttributeValues) != 3 || in.ReturnValuesOnConditionCheckFailure != types.ReturnValuesOnConditionCheckFailureAllOld {
		t.Errorf("input %+v", in)
	}
	if in := dynamotable.NewUpdate("k").SetValue("a", dynamotable.N(1)).Input("tbl"); in.ConditionExpression != nil || in.ReturnValuesOnConditionCheckFailure != "" {
		t.Errorf("an unconditional update has a condition: %+v", in)
	}
}

// Against dynalite: the calls, their refusals read by Refused, a request
// DynamoDB refuses read by Invalid and TooLarge, every call metered.
func TestTable(t *testing.T) {
	client := dynalitetest.Client(t, dynalitetest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := dynalitetest.TableName(t)
	if err := dynamotable.Create(ctx, client, name, dynamotable.PK, "expires_at"); err != nil {
		t.Fatal(err)
	}
	var calls []string
	table := dynamotable.NewTable(client, name, dynamotable.TableQuota)
	table.SetObserver(observer(func(role, op, outcome string, _ time.Duration) {
		calls = append(calls, role+"/"+op+"/"+outcome)
	}))
	item := dynamotable.Item{dynamotable.PK: dynamotable.S("k"), "n": dynamotable.N(1)}
	absent := "attribute_not_exists(#pk)"
	names := map[string]string{"#pk": dynamotable.PK}
	if err := table.Put(ctx, "put", item, absent, names, nil); err != nil {
		t.Fatal(err)
	}
	err := table.Put(ctx, "put", item, absent, names, nil)
	if _, refused := dynamotable.Refused(err); !refused || dynamotable.Classify(err) != dynamotable.OutcomeConditionFailed {
		t.Errorf("a second put: %v, want refused", err)
	}
	u := dynamotable.NewUpdate("k").Name("#n", "n").Value(":n", dynamotable.N(2)).Add("#n :n").If("#n < :two").Value(":two", dynamotable.N(2))
	u.Return = types.ReturnValueAllNew
	got, err := table.Update(ctx, "add", u)
	if n, _ := dynamotable.Int(got, "n"); err != nil || n != 3 {
		t.Fatalf("update: %v, n = %d, want 3", err, n)
	}
	if _, err := table.Update(ctx, "add", u); dynamotable.Classify(err) != dynamotable.OutcomeConditionFailed {
		t.Errorf("a refused update: %v", err)
	}
	if got, err := table.Get(ctx, "get", "k", true); err != nil || dynamotable.String(got, dynamotable.PK) != "k" {
		t.Errorf("get: %v %v", got, err)
	}
	if got, err := table.Get(ctx, "get", "absent", false); err != nil || got != nil {
		t.Errorf("get of an absent item: %v %v, want nil", got, err)
	}
	big := dynamotable.Item{dynamotable.PK: dynamotable.S("big"), "b": dynamotable.B([]byte(strings.Repeat("x", 410<<10)))}
	if err := table.Put(ctx, "put", big, "", nil, nil); !dynamotable.TooLarge(err) || !dynamotable.Invalid(err) {
		t.Errorf("a 410 KB item: %v, want too large", err)
	}
	bad := dynamotable.NewUpdate("k").Set("#undefined = :undefined")
	if _, err := table.Update(ctx, "add", bad); !dynamotable.Invalid(err) || dynamotable.TooLarge(err) {
		t.Errorf("an update with unbound placeholders: %v, want invalid", err)
	}
	var keys []string
	if err := table.Scan(ctx, "list", func(items []dynamotable.Item) {
		for _, it := range items {
			keys = append(keys, dynamotable.String(it, dynamotable.PK))
		}
	}); err != nil || fmt.Sprint(keys) != "[k]" {
		t.Errorf("scan: %v %v", keys, err)
	}
	want := []string{"quota/put/ok", "quota/put/condition_failed", "quota/add/ok", "quota/add/condition_failed", "quota/get/ok",
		"quota/get/ok", "quota/put/other", "quota/add/other", "quota/list/ok"}
	if !slices.Equal(calls, want) {
		t.Errorf("metered %v, want %v", calls, want)
	}
}
