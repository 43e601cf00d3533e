package backend

import "time"

// RoomFactor is how much larger than the newest snapshot the next one is expected to be, at
// most: a destination with less free space than the newest snapshot's size times it is full.
const RoomFactor = 1.2

// Room is what to remove from a destination before a snapshot is saved to it, so that the
// snapshot fits (Retention.MakeRoom).
type Room struct {
	// Need is the free space the next snapshot is expected to take (the newest's size ×
	// RoomFactor; 0 without a snapshot to go by), Free what the destination has.
	Need, Free int64
	// Remove are the snapshots to remove, oldest first: those the policy removes anyway, then,
	// if that was not enough, the oldest the policy keeps, never the newest.
	Remove []Snapshot
	// BeyondPolicy are those of Remove that the policy keeps: removed for space only (say so).
	BeyondPolicy []Snapshot
	// Enough reports whether the removals make room for Need.
	Enough bool
}

// MakeRoom decides what to remove of snaps (a cluster's snapshots, all verified) at now before
// the next snapshot is saved to a destination with free bytes free: nothing when there is room;
// else the oldest that r removes anyway, until there is room; and if that is not enough, the
// oldest of those r keeps, but never the newest snapshot.
func (r Retention) MakeRoom(snaps []Snapshot, now time.Time, free int64) Room {
	room := Room{Free: free}
	order := NewestFirst(snaps)
	if len(order) == 0 {
		room.Enough = true // nothing to go by, nothing to remove
		return room
	}
	room.Need = int64(float64(snaps[order[0]].Size) * RoomFactor)
	if free >= room.Need {
		room.Enough = true
		return room
	}
	kept := r.Kept(snaps, now)
	removed := make([]bool, len(snaps))
	// First what the policy removes anyway, then what it keeps; oldest first, never the newest.
	for _, policy := range []bool{false, true} {
		for j := len(order) - 1; j >= 1 && free < room.Need; j-- {
			i := order[j]
			if removed[i] || kept[i] != policy {
				continue
			}
			removed[i] = true
			free += max(snaps[i].Size, 0)
			room.Remove = append(room.Remove, snaps[i])
			if policy {
				room.BeyondPolicy = append(room.BeyondPolicy, snaps[i])
			}
		}
	}
	room.Enough = free >= room.Need
	return room
}
