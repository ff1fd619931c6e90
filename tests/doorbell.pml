/*
 * The doorbell protocol of shm/doorbell.h, for spin: NPROD producers each
 * publish PER records into their own lane; one consumer drains and sleeps on
 * the futex word when it sees nothing. A lost wake-up leaves the consumer
 * blocked forever while records wait: spin reports it as an invalid end
 * state (and the final assertion would fail).
 *
 * Memory model: sequentially consistent. That is what the code's barriers
 * buy: F1 orders a producer's tail store before its load of `sleeping`
 * (a fence, or, with the asymmetric doorbell, the consumer's
 * membarrier(GLOBAL_EXPEDITED) runs that barrier on the producer's CPU),
 * F2 orders the consumer's store of `sleeping` before its loads of the
 * tails; the remaining orderings are release/acquire pairs on single
 * words, which SC also covers.
 *
 * -DNO_RECHECK drops the consumer's re-check after announcing sleep, and
 * -DWORD_LATE reads the futex word after announcing it: both are wrong, and
 * spin must find the lost wake-up in each (the test runs all three).
 */
#define NPROD 2
#define PER 2

byte tail[NPROD];
byte head[NPROD];
bit sleeping;
byte word;
bit blocked;
byte consumed;

inline any_pending(r) {
	r = 0;
	i = 0;
	do
	:: i < NPROD -> if :: head[i] != tail[i] -> r = 1 :: else -> skip fi; i++
	:: else -> break
	od
}

active proctype consumer()
{
	byte w, i;
	bit pending;

	do
	:: consumed == NPROD * PER -> break
	:: else ->
		i = 0;
		do
		:: i < NPROD ->
			if
			:: head[i] != tail[i] -> head[i]++; consumed++
			:: else -> skip
			fi;
			i++
		:: else -> break
		od;
		if
		:: consumed == NPROD * PER -> break
		:: else -> skip
		fi;
#ifndef WORD_LATE
		w = word;
#endif
		sleeping = 1;		/* then F2 */
#ifdef WORD_LATE
		w = word;
#endif
#ifdef NO_RECHECK
		pending = 0;
#else
		any_pending(pending);
#endif
		if
		:: pending -> skip
		:: else ->
			/* futex_wait(word, w): the kernel checks the value and
			 * queues the waiter atomically. */
			atomic {
				if
				:: word != w -> blocked = 0
				:: else -> blocked = 1
				fi
			}
			(blocked == 0)
		fi;
		sleeping = 0
	od;
	assert(consumed == NPROD * PER)
}

active [NPROD] proctype producer()
{
	byte n = 0;
	byte me = _pid - 1;
	bit rang;

	do
	:: n < PER ->
		tail[me]++;		/* publish (R2), then F1 */
		n++;
		if
		:: sleeping == 1 ->
			atomic {	/* CAS(sleeping, 1 -> 0) */
				if
				:: sleeping == 1 -> sleeping = 0; rang = 1
				:: else -> rang = 0
				fi
			}
			if
			:: rang ->
				word++;
				blocked = 0	/* futex_wake */
			:: else -> skip
			fi
		:: else -> skip
		fi
	:: else -> break
	od
}
