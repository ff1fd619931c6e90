/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory layout (segment ABI V05_SHM_ABI, below; docs/SHM.md has
 * every region field by field). Everything in this file lives in
 * a segment mapped by several processes, so: fixed-width types and byte
 * offsets only, never a pointer; every struct's size and alignment checked
 * by static_assert; single-writer fields grouped on their own cache lines.
 *
 * Protection is per page, so what one role may write and another must not
 * never shares a page: a producer maps only its own lane and the doorbell
 * page; the owner word, the other lanes and everything the owner trusts
 * (lane statistics, counters, state) lie in pages it never maps.
 *
 * And per file: each lane and the doorbell page live in their own file,
 * in a directory next to the segment's file that only the segment's uid
 * can write (v05-NAME:side/lane.<i>, v05-NAME:side/bell, always mode
 * 0600), which every process mapping the segment maps over the lane's and
 * the doorbell region's pages (MAP_FIXED): offsets within the segment do
 * not change. The segment file itself holds holes there. A producer that
 * comes through the broker (shm/broker.c) gets no file of the segment at
 * all: its lane is a sealed memfd of the owner's, which no one can
 * resize, mapped by the owner over that lane's pages for as long as the
 * grant lasts, and its doorbell a second sealed page the owner waits on
 * beside the segment's (outside the segment: plugin/guard.c).
 *
 *   +----------------------+ 0
 *   | header page          |  immutable after create, xxHash-checksummed
 *   +----------------------+ regions[] (each page-aligned, disjoint):
 *   | control block        |  owner word, epoch, heartbeat (owner only)
 *   | producer lanes       |  lane_count x page_up(ring header + records),
 *   |                      |  each its own file (or a granted memfd)
 *   |                      |  mapped over its pages
 *   | prompt table         |  table_capacity x 64-byte entries
 *   | sample arena         |  slot_count x slot_stride
 *   | completion ring      |  plugin -> reader: finalized slots
 *   | release ring         |  reader -> plugin: slots done with
 *   | support buffer       |  last finalized (key, mean, k)
 *   | batches              |  batch_count x batch records
 *   | state                |  counters, plugin state, running fits
 *   |                      |  (owner only)
 *   | doorbell             |  futex word, sleeping flag (producers too),
 *   |                      |  its own file mapped over its page
 *   | lane statistics      |  per lane: head, counts (owner only)
 *   +----------------------+ total_size
 */
#ifndef V05_SHM_LAYOUT_H
#define V05_SHM_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define V05_SHM_MAGIC 0x01006d6873353076ull /* "v05shm\0\1" little-endian */
#define V05_SHM_ABI 9u /* 9: v05-eb's fit over the population's shape:
			* its state (the plugin's and the other engines')
			* in a larger state region, the shape in the batch
			* record, the last barrier fit; eb_first in the
			* stored config; v05-pg's parameters in the stored
			* config, its running statistics in the state region.
			* 8: a segment's side files in a directory only its
			* uid can write (v05-NAME:side), the broker's socket
			* there; lanes granted by the broker are sealed
			* memfds (lane statistics of 192 bytes: the grant).
			* EBPO's running statistics in the state region,
			* Pilot-Commit's band and EBPO's window in the
			* stored config.
			* 7: the keep mask in the slot header.
			* 6: v05-eb's running fit in the state
			* region; its window and cold start in the config.
			* 5: lane statistics of 128 bytes (records applied
			* and rejected per lane, the cut-off), a lane's quit
			* word, the broker's allow-list in the stored config.
			* 4: each lane and the doorbell in a file of their own
			* (a producer of another uid gets only its lane's
			* descriptor, from the owner's broker), lanes bound to
			* a uid; a record names its prompt instance (gen), not
			* a time. 3: producers map only their lane */
#define V05_PAGE 4096u
#define V05_LINE 128u /* two 64-byte lines: adjacent-line prefetch */

#define V05_UID_MAX 128u
#define V05_CONFIG_BYTES 768u
#define V05_LANES_MAX 256u
#define V05_LANE_CAP_MIN 16u
#define V05_LANE_CAP_MAX (1u << 22)
#define V05_SLOTS_MAX (1u << 22)
#define V05_BATCHES_MAX 4096u
#define V05_SUPPORT_MAX 65536u

enum v05_region_id {
	V05_REGION_CONTROL = 0,
	V05_REGION_LANES,
	V05_REGION_TABLE,
	V05_REGION_ARENA,
	V05_REGION_COMPLETION,
	V05_REGION_RELEASE,
	V05_REGION_SUPPORT,
	V05_REGION_BATCHES,
	V05_REGION_STATE, /* counters and plugin state: the owner's alone */
	V05_REGION_DOORBELL,   /* the one page every producer writes      */
	V05_REGION_LANE_STATS, /* per-lane state the owner trusts          */
	V05_REGION_COUNT
};

struct v05_region {
	uint64_t offset; /* from the segment start, multiple of V05_PAGE */
	uint64_t size;   /* bytes, multiple of V05_PAGE */
};

/* Capacities; layout.c derives every region's size from these alone. */
struct v05_geometry {
	uint32_t lane_count;       /* producer lanes, 1..V05_LANES_MAX        */
	uint32_t lane_capacity;    /* records per lane, power of two          */
	uint32_t table_capacity;   /* prompt table, power of two >= 2 slots   */
	uint32_t slot_count;       /* prompts active at once                  */
	uint32_t k_max;            /* samples per slot, 1..64                 */
	uint32_t ring_capacity;    /* completion/release rings, pow2 >= slots */
	uint32_t support_capacity; /* support buffer entries                  */
	uint32_t batch_count;      /* batches in flight at once               */
	uint32_t slot_stride;      /* bytes per slot (derived, checked)       */
	uint32_t reserved;         /* 0                                       */
};
static_assert(sizeof(struct v05_geometry) == 40, "geometry ABI");

struct v05_shm_header {
	uint64_t magic;       /* stored last at create, with release (R0)   */
	uint32_t abi_version; /* V05_SHM_ABI                                */
	uint32_t header_size; /* sizeof(struct v05_shm_header)              */
	uint64_t total_size;  /* bytes; equals the object's st_size         */
	uint32_t page_size;   /* V05_PAGE                                   */
	uint32_t creator_uid;
	uint64_t created_ns;  /* CLOCK_REALTIME                             */
	uint32_t flags;       /* V05_SHM_F_*                                */
	uint32_t reserved;    /* 0                                          */
	struct v05_geometry geo;
	struct v05_region regions[V05_REGION_COUNT];
	uint8_t config[V05_CONFIG_BYTES]; /* the plugin's (opaque here)     */
	uint64_t checksum;    /* XXH3_64bits of every byte before this one  */
};
static_assert(sizeof(struct v05_shm_header) == 1040, "header ABI");
static_assert(offsetof(struct v05_shm_header, checksum) == 1032, "header ABI");

/* Header flags: fixed at create, covered by the checksum, so no process
 * that maps the segment writable can change them. */
#define V05_SHM_F_ASYM_DOORBELL 0x1u /* the consumer membarriers (doorbell.h) */
#define V05_SHM_F_ALL V05_SHM_F_ASYM_DOORBELL
static_assert(sizeof(struct v05_shm_header) <= V05_PAGE, "header page");


/* Counters in the state region: the plugin's (plugin/mechanics/vocab.h
 * names them). */
#define V05_COUNTERS 256

enum v05_wait_path_id {
	V05_WAIT_NONE = 0,
	V05_WAIT_IO_URING = 1,
	V05_WAIT_THREAD = 2,
};

/* Ownership, in a page only the owner writes (readers and inspectors map
 * it read-only, producers not at all). */
struct v05_shm_control {
	uint64_t owner;        /* owner word (proc.h) of the plugin; 0 none */
	uint64_t owner_epoch;  /* incremented at each takeover              */
	uint64_t heartbeat_ns; /* CLOCK_MONOTONIC at the owner's last poll  */
	uint32_t owner_pid;    /* for display                               */
	uint32_t wait_path;    /* enum v05_wait_path_id, for display        */
	/* The side directory that is this segment's (its st_dev, st_ino),
	 * set when it is made: the directory at the name v05-NAME:side is
	 * this file's only if it is this one (a replace exchanges the two
	 * names one after the other; shm/segment_stage.c). 0: not known
	 * (a segment made before this word was kept): the name decides. */
	uint64_t side_dev, side_ino;
	/* What the holder of the owner word does (enum v05_claim_why):
	 * owns it, replaces it, removes it. For messages only; the owner
	 * word alone decides. */
	uint32_t claim;
	/* The prompt table's sequence word (shm/table.c): odd while the
	 * owner moves entries (a delete's shift, a repair), so that a reader
	 * in another process (v05_observer_prompt) can tell a lookup that
	 * raced with a move from one that found nothing. Took padding that
	 * was 0 (segment ABI still 8): a segment of an older owner never
	 * changes it, and lookups in it go unchecked. */
	uint32_t table_seq;
	uint8_t pad0[V05_LINE - 56];
};
static_assert(sizeof(struct v05_shm_control) == V05_LINE, "ctl");
static_assert(offsetof(struct v05_shm_control, side_ino) == 40, "ctl");
static_assert(offsetof(struct v05_shm_control, table_seq) == 52, "ctl");

enum v05_claim_why {
	V05_CLAIM_OWNER = 0,   /* a plugin owns it                        */
	V05_CLAIM_REPLACE = 1, /* v05_plugin_replace puts another in place */
	V05_CLAIM_RECLAIM = 2, /* v05_segment_reclaim removes it          */
};

/* The doorbell page: the only page every producer maps writable. Any
 * value a producer stores here costs at most a wake-up (docs/SHM.md). */
struct v05_shm_doorbell {
	/* Line 0: the futex word, bumped by a producer that rings. */
	uint32_t doorbell;
	uint32_t pad0a;
	uint8_t pad0[V05_LINE - 8];
	/* Line 1: set by a consumer about to sleep, read by every producer
	 * on every publish: kept alone so no other write invalidates it. */
	uint32_t sleeping;
	uint8_t pad1[V05_LINE - 4];
};
static_assert(offsetof(struct v05_shm_doorbell, sleeping) == V05_LINE, "bell");
static_assert(sizeof(struct v05_shm_doorbell) == 2 * V05_LINE, "bell");

/*
 * The owner's state, in its own region: producers do not map it, readers
 * and inspectors map it read-only. Nothing a producer can write is read by
 * the consumer as a count, an index or a string: a producer process owns
 * its lanes and can ring the doorbell, nothing more.
 */
struct v05_shm_state {
	uint64_t counters[V05_COUNTERS];
	/* Persistent state the plugin keeps across takeovers (plugin.h). */
	uint8_t plugin[1024];
	/* The rules' running state: v05-eb's running fit, EBPO's statistics
	 * (plugin/rules/rule.h: struct v05_fit_store). */
	uint8_t fit[40960];
};
static_assert(sizeof(struct v05_shm_state) == 2048 + 1024 + 40960, "state");

/*
 * SPSC ring header, used by the lanes (producer -> plugin), the completion
 * ring (plugin -> reader) and the release ring (reader -> plugin). Indices
 * are free-running u32; the slot of index i is i & (capacity - 1), the
 * capacity always coming from the validated header, never from here.
 */
struct v05_ring_hdr {
	/* Line 0: the claiming peer (a producer, or the reader). */
	uint64_t owner;  /* owner word; 0 = free; V05_OWNER_CUT: a lane
			  * the plugin cut off (lanes.h)                */
	uint64_t quit;   /* a lane's: the owner word of a producer that
			  * gave the lane up after it was cut off (stored
			  * at close); only compared, never trusted     */
	uint8_t pad0[V05_LINE - 16];
	/* Line 1: written by the ring's producer only. */
	uint32_t tail;   /* entries published                          */
	uint8_t pad1[V05_LINE - 4];
	/* Line 2: written by the ring's consumer only. In a lane, a copy
	 * published for the producer; the consumer's own is in the lane
	 * statistics (owner-only memory), which a takeover trusts. */
	uint32_t head;       /* entries consumed                       */
	uint8_t pad2[V05_LINE - 4];
};
static_assert(sizeof(struct v05_ring_hdr) == 3 * V05_LINE, "ring header");
static_assert(offsetof(struct v05_ring_hdr, tail) == V05_LINE, "ring header");
static_assert(offsetof(struct v05_ring_hdr, head) == 2 * V05_LINE, "ring hdr");

/*
 * The owner word of a lane the plugin cut off (shm/lanes.c): pid 0, which
 * no process has, so no claim, reservation or liveness check takes it for
 * a producer's. A producer whose word was replaced by it learns on its
 * next push that it was cut off.
 */
#define V05_OWNER_CUT 0xffffffffull
/*
 * The owner word of a lane's file while the broker has granted the lane
 * as a memfd (shm/broker.c): producers claiming by name see it held; the
 * consumer neither reclaims nor reads the file meanwhile.
 */
#define V05_OWNER_MOVED 0xfffffffeull

/*
 * Where lane i's ring starts within its first page. Lanes start on pages
 * (a producer maps exactly its own), so without a skew the same record
 * index of every lane would share its low 12 address bits: the consumer,
 * draining lanes in turn, would meet 4 KiB aliasing and L1 set conflicts.
 * 16 skews of 256 bytes keep them apart.
 */
#define V05_LANE_SKEWS 16u
#define V05_LANE_SKEW 256u
static inline uint32_t v05__lane_skew(uint32_t i)
{
	return (i % V05_LANE_SKEWS) * V05_LANE_SKEW;
}

/* A lane's stride: the largest skew, the ring header and the records,
 * rounded up to whole pages so that a producer maps exactly its lane. */
static inline uint64_t v05__lane_stride(uint32_t capacity)
{
	uint64_t b = (V05_LANE_SKEWS - 1) * V05_LANE_SKEW +
		     sizeof(struct v05_ring_hdr) + (uint64_t)capacity * 32u;

	return (b + V05_PAGE - 1) & ~(uint64_t)(V05_PAGE - 1);
}

/*
 * Per lane, in owner-only memory: what the consumer knows of the lane and
 * trusts. Nothing here is read from a page a producer can write, so no
 * producer can falsify these counts or move a takeover's starting point.
 *
 * A lane is its file (v05-NAME:side/lane.<i>, claimed by name by producers
 * of the segment's uid) or, while the broker has granted it, a sealed
 * memfd of the owner's (shm/broker.c): granted while grant != reverted.
 * The broker thread writes line 2 and the poll thread the rest; a grant
 * hands the lane from one to the other, and its end back, decided by one
 * CAS on grant_end (shm/lanes.h; docs/SHM.md, "The broker").
 */
struct v05_lane_own {
	/* Line 0: the lanes' (shm/lanes.c). */
	uint32_t head;       /* entries consumed: where a takeover resumes */
	uint32_t high_water; /* largest tail - head the consumer saw       */
	uint64_t consumed;   /* total consumed, across reclaims            */
	uint64_t claims;     /* claims the consumer observed (owner words) */
	uint64_t reclaims;   /* dead producers' lanes freed                */
	uint64_t owner_seen; /* the lane's owner word at the last check    */
	/* A file lane cut off: the owner word the consumer saw at the cut
	 * (maybe 0: a producer that never claimed), and the earliest time
	 * it is given back (the uid's backoff, CLOCK_MONOTONIC). */
	uint64_t cut_owner;
	uint64_t cut_until_ns;
	uint64_t discarded;  /* records of cut claims dropped unread       */
	/* Line 1: the plugin's accounting of the records it was handed
	 * (plugin/guard.c): all time, and the window that decides the
	 * cut-off, keyed on owner-controlled state only: the lane, and the
	 * grant it counts (win_grant; a new grant starts an empty window). */
	uint64_t applied;    /* records applied                            */
	uint64_t rejected;   /* records rejected, any reason (corrupt too) */
	uint64_t win_records;  /* the window's records, halved at 2N        */
	uint64_t win_rejected; /* ... and the rejected among them           */
	uint32_t win_grant;    /* the grant (line 2) the window counts      */
	uint32_t cut;          /* 1: cut off now (its records not read)     */
	uint32_t cuts;         /* claims or grants cut off                  */
	uint32_t cut_records;  /* the window at the last cut: records ...   */
	uint32_t cut_rejected; /* ... and rejected (saturated)              */
	uint32_t cut_pid;      /* the producer cut off last (display)       */
	uint8_t pad1[8];
	/* Line 2: the broker thread's (shm/broker.c), but reverted. */
	uint32_t grant;      /* the last grant of this lane made (a memfd
			      * each; numbered in the low 30 bits)         */
	uint32_t grant_end;  /* the grant whose producer left (its socket
			      * closed) or never claimed; | TAKEN once the
			      * poll thread takes it to revert it, | AGAIN
			      * once the broker grants the lane again
			      * (shm/lanes.h)                              */
	uint32_t reverted;   /* poll thread: the last grant it reverted to
			      * the lane's file; granted iff != grant      */
	uint32_t grant_uid;  /* the peer of the current or last grant      */
	uint32_t grant_gid;
	uint32_t grant_pid;
	uint8_t pad2[40];
};
static_assert(sizeof(struct v05_lane_own) == 192, "lane statistics ABI");
static_assert(offsetof(struct v05_lane_own, applied) == 64 &&
	      offsetof(struct v05_lane_own, grant) == 128,
	      "lane statistics ABI");

/*
 * A record in a producer lane: 32 bytes, two per 64-byte line. gen
 * names the instance of the prompt (the decision's gen): a uid released
 * and submitted again is another instance, so a late reward for the first
 * one is never credited to the second, whenever it was pushed.
 *
 * Two kinds, told apart by flags: a reward (0) and an abort of the
 * instance (V05_RECORD_ABORT, sample and reward 0; v05_producer_abort).
 * The lanes pass any kind of V05_RECORD_KINDS on; what a kind means, and
 * whether a segment takes it, is the plugin's (docs/SHM.md, "Abort
 * records"). Any other flag is bytes the library did not write: corrupt.
 */
#define V05_RECORD_ABORT (1u << 0)
#define V05_RECORD_KINDS V05_RECORD_ABORT
struct v05_record {
	uint64_t key;          /* v05_key(uid)                             */
	uint32_t gen;          /* the decision's gen: the prompt instance  */
	uint32_t sample;       /* sample index within the prompt's group   */
	float reward;          /* in [-1, 1]                               */
	uint32_t flags;        /* 0 or V05_RECORD_ABORT; else corrupt      */
	uint32_t seq;          /* the lane index it was written at         */
	uint32_t zero;         /* 0, checked with flags                    */
};
static_assert(sizeof(struct v05_record) == 32, "record ABI");

struct v05_completion {
	uint64_t key;
	uint32_t slot;
	uint32_t gen; /* the slot's generation when it was finalized */
};
static_assert(sizeof(struct v05_completion) == 16, "completion ABI");

struct v05_release {
	uint32_t slot;
	uint32_t gen;
};
static_assert(sizeof(struct v05_release) == 8, "release ABI");

/* Prompt table entry: one 64-byte line. Written by the consumer only. */

struct v05_prompt {
	uint64_t key;      /* 0 = empty                                    */
	uint64_t issued;   /* bit s: sample s was handed out               */
	uint64_t received; /* bit s: sample s's reward was applied         */
	double prior;
	uint32_t slot;
	uint32_t batch;    /* index into the batches region                */
	uint8_t state;     /* enum v05_prompt_state (plugin/mechanics/vocab.h) */
	uint8_t k_planned; /* group size after the pending release         */
	uint8_t round;
	uint8_t pad8;
	float gap;         /* k_target - k at the last decision (padding)  */
	uint64_t last_ts;  /* CLOCK_MONOTONIC (the plugin's) at which the
			    * last reward was applied; 0 none yet         */
	uint32_t gen;      /* the instance: its slot's generation, unique
			    * per allocation; a reward must carry it      */
	uint8_t k_first;   /* samples of its first wave (the rule's at
			    * submit); 0 in an entry an older library
			    * wrote, whose first waves were all k_init    */
	uint8_t pad_k[3];
};
static_assert(sizeof(struct v05_prompt) == 64, "prompt entry is one line");

/* Sample arena slot: header, uid, then k_max rewards and k_max advantages
 * (float32 each, each array padded to 64 bytes). */
enum v05_slot_state {
	V05_S_FREE = 0,
	V05_S_ACTIVE,   /* the prompt is collecting                      */
	V05_S_FINAL,    /* advantages written; readable                  */
	V05_S_RELEASED, /* released, waiting for the journal to catch up */
};


struct v05_slot_hdr {
	uint64_t key;
	uint32_t state;  /* enum v05_slot_state; store-release at FINAL  */
	uint32_t gen;    /* at each allocation, the next of a counter over
			  * all slots (arena.h): unique per prompt instance */
	uint32_t k;      /* final group size                             */
	uint32_t action; /* enum v05_action at final (stop or drop)      */
	uint32_t uid_len;
	uint32_t flags;  /* enum v05_slot_flag (plugin/mechanics/vocab.h)  */
	double prior;
	double baseline;
	double sigma;
	double mean;
	uint64_t seq;         /* group sequence number, from 1, at final  */
	uint64_t submit_ns;   /* CLOCK_REALTIME                           */
	uint64_t final_ns;    /* CLOCK_REALTIME                           */
	uint64_t batch_id;
	uint64_t keep;        /* bit i: sample i is trained on, at final  */
	uint8_t pad[128 - 104];
	uint8_t uid[V05_UID_MAX];
};
static_assert(sizeof(struct v05_slot_hdr) == 256, "slot header ABI");

struct v05_support_hdr {
	uint64_t written; /* entries ever written; entry i at i % capacity */
	uint8_t pad[V05_LINE - 8];
};
struct v05_support_entry {
	uint64_t key;
	float mean; /* mean reward of the finalized group */
	uint32_t k;
};
static_assert(sizeof(struct v05_support_entry) == 16, "support entry ABI");


struct v05_batch_rec {
	uint64_t id;        /* from 1; 0 when free                       */
	uint32_t state;     /* enum v05_batch_state (plugin/mechanics/vocab.h) */
	uint32_t n_prompts; /* accepted at submit                        */
	uint32_t round;
	uint32_t pad_a;
	uint64_t submit_ns; /* CLOCK_MONOTONIC                           */
	uint64_t hold_since_ns; /* stream: oldest held decision, 0 none  */
	double eb_n0;       /* v05-eb: the batch's fit; 0 until fitted   */
	double eb_h;
	uint32_t eb_shape;  /* its second component's (v05_eb_shape_at) */
	uint32_t pad_b;
};
static_assert(sizeof(struct v05_batch_rec) == 64, "batch record ABI");

/*
 * A typed pointer into a mapped region. Every offset handed to it is a
 * multiple of the type's alignment by construction (regions are page-aligned,
 * lane and slot strides are multiples of 64), which the void * step tells
 * the compiler.
 */
#define V05_AT(type, base, off) ((type *)(void *)((uint8_t *)(base) + (off)))

/* Slot stride for k_max samples: header + two float arrays of 64 bytes. */
static inline uint32_t v05__slot_stride(uint32_t k_max)
{
	uint32_t arr = (k_max * 4u + 63u) & ~63u;

	return (uint32_t)sizeof(struct v05_slot_hdr) + 2u * arr;
}
static inline uint32_t v05__slot_adv_offset(uint32_t k_max)
{
	return (uint32_t)sizeof(struct v05_slot_hdr) + ((k_max * 4u + 63u) & ~63u);
}

/* 0 or -EDOM/-EINVAL with v05_errmsg(); fills geo->slot_stride if 0. */
int v05__geometry_check(struct v05_geometry *geo);
/* Regions and total size of a valid geometry. */
void v05__layout(const struct v05_geometry *geo,
		 struct v05_region regions[V05_REGION_COUNT], uint64_t *total);

#endif
