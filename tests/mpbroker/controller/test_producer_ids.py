"""Producer id blocks (mpbroker/controller/producer_ids.py)."""
import asyncio

from mpbroker.controller.producer_ids import BLOCK_SIZE, ProducerIdBlocks


def test_ids_come_from_claimed_blocks_one_claim_at_a_time():
    claims = []

    async def claim():
        claims.append(len(claims) * BLOCK_SIZE + 5000)
        await asyncio.sleep(0)          # a claim that yields: concurrent callers wait for it
        return claims[-1]

    async def main():
        blocks = ProducerIdBlocks(claim)
        first = await asyncio.gather(*(blocks.allocate() for _ in range(3)))
        rest = [await blocks.allocate() for _ in range(BLOCK_SIZE)]
        return first, rest
    first, rest = asyncio.run(main())
    assert first == [5000, 5001, 5002] and len(claims) == 2
    assert rest[-1] == 5000 + BLOCK_SIZE + 2 and len(set(first + rest)) == BLOCK_SIZE + 3
