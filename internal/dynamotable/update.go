package dynamotable

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// PK is the partition key attribute (S) of every Jetway table.
const PK = "pk"

// Update is one UpdateItem in the one expression style of every store:
// plain strings with named placeholders, "#name" for an attribute name and
// ":name" for a value, the values built by the codec (S, N, ...). Clauses
// are added in any order; Input joins them. Building a conditional quota
// update this way costs a tenth of the expression builder's allocations
// (docs/benchmarks.md, "One DynamoDB codec").
type Update struct {
	key                   string
	set, add, remove, ifs []string
	names                 map[string]string
	values                Item
	// Return is what a successful update returns (none by default).
	Return types.ReturnValue
	// room backs the clause lists of an ordinary update, allocated with
	// it (the hot conditional writes append without allocating).
	room [12]string
}

// NewUpdate starts an update of the item whose partition key is key.
func NewUpdate(key string) *Update {
	u := &Update{key: key, names: make(map[string]string, 8), values: make(Item, 8)}
	u.set, u.add, u.remove, u.ifs = u.room[0:0:4], u.room[4:4:6], u.room[6:6:7], u.room[7:7:12]
	return u
}

// Key is the partition key of the updated item.
func (u *Update) Key() string { return u.key }

// Name binds the placeholder ph ("#x") to the attribute name.
func (u *Update) Name(ph, name string) *Update {
	u.names[ph] = name
	return u
}

// Value binds the placeholder ph (":x") to v.
func (u *Update) Value(ph string, v types.AttributeValue) *Update {
	u.values[ph] = v
	return u
}

// Set adds a SET action, such as "#seq = :seq".
func (u *Update) Set(action string) *Update { return u.with(&u.set, action) }

// Add adds an ADD action, such as "#used :used".
func (u *Update) Add(action string) *Update { return u.with(&u.add, action) }

// Remove adds a REMOVE action, such as "#cancel".
func (u *Update) Remove(action string) *Update { return u.with(&u.remove, action) }

// If adds a condition; the update applies only when all of them hold
// (each is parenthesized, so one may hold an OR).
func (u *Update) If(cond string) *Update { return u.with(&u.ifs, cond) }

// with appends clause to list.
func (u *Update) with(list *[]string, clause string) *Update {
	*list = append(*list, clause)
	return u
}

// SetValue adds SET #name = :name, binding both placeholders (name must
// be a valid placeholder: letters, digits and underscores). It builds its
// strings; hot paths write the clause and bind the placeholders instead.
func (u *Update) SetValue(name string, v types.AttributeValue) *Update {
	return u.Name("#"+name, name).Value(":"+name, v).Set("#" + name + " = :" + name)
}

// RemoveAttr adds REMOVE #name, binding the placeholder.
func (u *Update) RemoveAttr(name string) *Update {
	return u.Name("#"+name, name).Remove("#" + name)
}

// Input is the UpdateItem of table. A refused condition returns the item
// it saw (DynamoDB does; dynalite does not, see Refused).
func (u *Update) Input(table string) *dynamodb.UpdateItemInput {
	var expr strings.Builder
	expr.Grow(clausesLen(u.set) + clausesLen(u.add) + clausesLen(u.remove) + len(" REMOVE  ADD SET"))
	clause := func(verb string, actions []string) {
		if len(actions) == 0 {
			return
		}
		if expr.Len() > 0 {
			expr.WriteByte(' ')
		}
		expr.WriteString(verb)
		for i, a := range actions {
			if i > 0 {
				expr.WriteByte(',')
			}
			expr.WriteByte(' ')
			expr.WriteString(a)
		}
	}
	clause("SET", u.set)
	clause("ADD", u.add)
	clause("REMOVE", u.remove)
	in := &dynamodb.UpdateItemInput{
		TableName:        aws.String(table),
		Key:              Item{PK: S(u.key)},
		UpdateExpression: aws.String(expr.String()),
		ReturnValues:     u.Return,
	}
	if len(u.names) > 0 {
		in.ExpressionAttributeNames = u.names
	}
	if len(u.values) > 0 {
		in.ExpressionAttributeValues = u.values
	}
	if len(u.ifs) > 0 {
		cond := u.ifs[0]
		if len(u.ifs) > 1 {
			var b strings.Builder
			b.Grow(clausesLen(u.ifs) + 7*len(u.ifs))
			for i, c := range u.ifs {
				if i > 0 {
					b.WriteString(" AND ")
				}
				b.WriteByte('(')
				b.WriteString(c)
				b.WriteByte(')')
			}
			cond = b.String()
		}
		in.ConditionExpression = aws.String(cond)
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return in
}

// clausesLen is the length of clauses and their separators.
func clausesLen(clauses []string) int {
	n := 0
	for _, c := range clauses {
		n += len(c) + 2
	}
	return n
}
