package cdc

import "testing"

func TestReplicationCommands(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{createSlotCommand("s", "", false), `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput`},
		{createSlotCommand("s", "export", true), `CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)`},
		{createSlotCommand(`we"ird`, "", true), `CREATE_REPLICATION_SLOT "we""ird" LOGICAL pgoutput (FAILOVER true)`},
		{alterFailoverCommand("s", true), `ALTER_REPLICATION_SLOT "s" (FAILOVER true)`},
		{alterFailoverCommand("s", false), `ALTER_REPLICATION_SLOT "s" (FAILOVER false)`},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
