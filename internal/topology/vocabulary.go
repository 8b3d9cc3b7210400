package topology

// The one channel vocabulary. Callers, queues and templates each name a
// channel in their own words (the API says "email", the queues "mail"; a
// WeCom group robot is a channel to callers and a flag of the wecom
// queues' messages), and this table is the only place that says which is
// which. A new channel is a row here, its name in Channels, and its
// package: nothing else spells its names.

// Names is one channel as each part of msgpulse names it.
type Names struct {
	// API is the name callers use (the OpenAPI contract's Channel) and
	// status records keep: "email", "sms", "wecom", "wecom_robot".
	API string
	// Queue is the topology channel its messages travel through (Mail,
	// SMS, WeCom).
	Queue string
	// Template is the template channel that renders it: its files'
	// names (body.txt for email, sms.txt, wecom.txt).
	Template string
	// Robot: WeCom group robots, which share the wecom queues with
	// application messages and are told apart by a flag of the message.
	Robot bool
}

var vocabulary = []Names{
	{API: "email", Queue: Mail, Template: "email"},
	{API: "sms", Queue: SMS, Template: "sms"},
	{API: "wecom", Queue: WeCom, Template: "wecom"},
	{API: "wecom_robot", Queue: WeCom, Template: "wecom", Robot: true},
}

// ByAPI returns the channel callers call api; false for a name callers
// cannot use.
func ByAPI(api string) (Names, bool) {
	for _, n := range vocabulary {
		if n.API == api {
			return n, true
		}
	}
	return Names{}, false
}

// ByQueue returns the channel of a message on queue channel queue (robot:
// a WeCom group robot's); false for an unknown channel.
func ByQueue(queue string, robot bool) (Names, bool) {
	for _, n := range vocabulary {
		if n.Queue == queue && n.Robot == robot {
			return n, true
		}
	}
	return Names{}, false
}

// APINames lists every name callers may use, in the table's order.
func APINames() []string {
	names := make([]string, len(vocabulary))
	for i, n := range vocabulary {
		names[i] = n.API
	}
	return names
}
