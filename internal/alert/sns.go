package alert

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
)

// snsSubject is every message's Subject (what an email subscription
// shows; at most 100 ASCII characters).
const snsSubject = "Jetway quota threshold"

// SNS is the Sink that publishes each event to an SNS topic, the event's
// JSON as the message, with a "type" message attribute (EventType) for
// subscription filter policies.
type SNS struct {
	client *sns.Client
	topic  string
}

// NewSNS returns the sink publishing to topicARN. Throttling and
// unreachable endpoints are retried by the client's retryer; the caller
// sizes it.
func NewSNS(client *sns.Client, topicARN string) *SNS { return &SNS{client: client, topic: topicARN} }

// Name implements Sink.
func (s *SNS) Name() string { return SinkSNS }

// Send implements Sink with one Publish.
func (s *SNS) Send(ctx context.Context, body []byte) error {
	_, err := s.client.Publish(ctx, &sns.PublishInput{
		TopicArn: aws.String(s.topic),
		Message:  aws.String(string(body)),
		Subject:  aws.String(snsSubject),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"type": {DataType: aws.String("String"), StringValue: aws.String(EventType)},
		},
	})
	if err != nil {
		return fmt.Errorf("sns publish: %w", err)
	}
	return nil
}
