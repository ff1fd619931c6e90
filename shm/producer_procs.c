/* SPDX-License-Identifier: MIT */
/* This process's producers (producer_handle.h): the fork generation that
 * makes a forked child's handles refuse, the brokered producers whose
 * connections a forked child closes, and the segments a plugin of this
 * process owns, whose lanes its own producers mark in-process. */
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "atomics.h"
#include "producer_handle.h"

/* A handle belongs to the process that opened it: after fork the child
 * would be a second producer on an SPSC lane. The child's handles refuse. */
unsigned v05__producer_fork_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Brokered producers: a forked child closes their connections, or a
 * grant would outlive the producer for as long as the child lives. */
static pthread_mutex_t brokered_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v05_producer *brokered_all;

static void on_fork_prepare(void)
{
	pthread_mutex_lock(&brokered_mu);
}

static void on_fork_parent(void)
{
	pthread_mutex_unlock(&brokered_mu);
}

static void on_fork_child(void)
{
	v05__producer_fork_gen++;
	for (struct v05_producer *p = brokered_all; p; p = p->next) {
		if (p->conn >= 0)
			close(p->conn);
		p->conn = -1;
	}
	pthread_mutex_unlock(&brokered_mu);
}

static void register_atfork(void)
{
	pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
}

void v05__producer_atfork(void)
{
	pthread_once(&atfork_once, register_atfork);
}

void v05__producer_list(struct v05_producer *p, bool add)
{
	pthread_mutex_lock(&brokered_mu);
	if (add) {
		p->next = brokered_all;
		brokered_all = p;
	} else {
		for (struct v05_producer **q = &brokered_all; *q; q = &(*q)->next) {
			if (*q == p) {
				*q = p->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&brokered_mu);
}

/*
 * The cut-off spares producers in the owner's own process (the engine's
 * own reward writer): the owner learns which lanes they hold from them,
 * in process memory, never from the lane's owner word (which the
 * producer writes). Segments a plugin owns are listed here by identity.
 */
static pthread_mutex_t owned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct v05_segment *owned[64];

void v05__segment_own(struct v05_segment *seg, bool own)
{
	pthread_mutex_lock(&owned_mu);
	for (uint32_t i = 0; i < 64; i++) {
		if (own && !owned[i]) {
			owned[i] = seg;
			break;
		}
		if (!own && owned[i] == seg)
			owned[i] = NULL;
	}
	pthread_mutex_unlock(&owned_mu);
}

/* A producer of this process claims (on) or leaves lane i of seg. */
void v05__producer_mark_inproc(const struct v05_producer *p, bool on)
{
	const struct v05_segment *seg = p->seg;

	if (p->mapped) {
		/* Relaxed: a flag the consumer reads at a cut decision. */
		v05_store_relaxed(&p->seg->inproc[p->lane_index], (uint8_t)on);
		return;
	}
	pthread_mutex_lock(&owned_mu);
	for (uint32_t i = 0; i < 64; i++)
		if (owned[i] && owned[i]->st_dev == seg->st_dev &&
		    owned[i]->st_ino == seg->st_ino)
			v05_store_relaxed(&owned[i]->inproc[p->lane_index],
					  (uint8_t)on);
	pthread_mutex_unlock(&owned_mu);
}
