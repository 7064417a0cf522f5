/* pmq_record_layout.h: where the fields of a commit-log record lie, for the compiled
 * accelerators (broker/store/_speedups.c, client/_codec.c, spark/_arrowcodec.c).
 *
 * common/record_layout.py is the definition (it draws the record); this header
 * repeats its numbers for C, and tests/unit/test_record_layout.py checks every one
 * against it. Numbers only one accelerator needs (consume-queue and index geometry,
 * a topic's length limit as that file counts it) stay in that file.
 */
#ifndef PMQ_RECORD_LAYOUT_H
#define PMQ_RECORD_LAYOUT_H

#define HEAD_SIZE 48                /* TOTALSIZE .. BORNTIMESTAMP (record_layout.HEAD) */
#define POS_TOTALSIZE 0
#define POS_MAGIC 4
#define POS_BODYCRC 8
#define POS_QUEUEID 12
#define POS_FLAG 16
#define POS_QUEUEOFFSET 20          /* QUEUEOFFSET i64, then PHYSICALOFFSET i64 */
#define POS_PHYSICALOFFSET 28
#define POS_SYSFLAG 36
#define POS_BORNTIMESTAMP 40
#define POS_BORNHOST 48
#define HOST_V4_SIZE 8              /* IPv4 4 + port i32 */
#define HOST_V6_SIZE 20             /* IPv6 16 + port i32 */
#define STORE_TIMESTAMP_SIZE 8      /* at POS_BORNHOST + B; STOREHOST follows */
#define TAIL_AFTER_STOREHOST 12     /* RECONSUMETIMES i32, PREPAREDTRANSACTIONOFFSET i64 */
#define BODYLEN_SIZE 4              /* after TAIL_AFTER_STOREHOST; BODY follows */
#define MESSAGE_MAGIC_CODE 0xDAA320A7u
#define MESSAGE_MAGIC_CODE_V2 0xDAA320ABu
#define BLANK_MAGIC_CODE 0xCBD43194u    /* a segment's end filler (record_layout.py) */
#define SYSFLAG_COMPRESSED 0x1
#define SYSFLAG_BORNHOST_V6 0x10
#define SYSFLAG_STOREHOST_V6 0x20
#define SYSFLAG_TRANSACTION_MASK 0xC
#define SYSFLAG_TRANSACTION_PREPARED 0x4
#define SYSFLAG_TRANSACTION_ROLLBACK 0xC
#define MAX_PROPERTIES_LENGTH 32767

#endif /* PMQ_RECORD_LAYOUT_H */
