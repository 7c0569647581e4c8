// Descriptor intake: takes contract-version-1 descriptors (128 bytes, 16 beats of 64 bits,
// little-endian) from an AXI-Stream, checks each as docs/firmware.md specifies, keeps the
// header words of up to 2**SLOTS_LOG2 accepted descriptors, and hands their fields to the read
// engine and to the transmitter in order. A refused descriptor takes no slot: it is reported
// through `refuse` (a one-clock pulse with the error code and the descriptor's PSN) and sends
// nothing.
//
// Reset: rst high empties every slot (synchronous). One clock domain.
`default_nettype none

module mover_desc #(
    parameter integer ADDR_W = 32,
    parameter integer REGION_BITS = 2,
    parameter integer SLOTS_LOG2 = 2,
    parameter integer MAX_PAYLOAD = 4096
) (
    input  wire                               aclk,
    input  wire                               rst,
    input  wire                               enable,
    // CPU-set frame-memory regions
    input  wire [(ADDR_W<<REGION_BITS)-1:0]   region_base,
    input  wire [(32<<REGION_BITS)-1:0]       region_size,
    // descriptors
    input  wire [63:0]                        s_tdata,
    input  wire                               s_tvalid,
    input  wire                               s_tlast,
    input  wire                               s_tuser,   // with TLAST: abort (refuse) it
    output wire                               s_tready,
    // to the read engine: where the payload lies
    output wire                               rd_valid,
    output wire [ADDR_W-1:0]                  rd_addr,
    output wire [12:0]                        rd_len,
    input  wire                               rd_pop,
    // to the transmitter: the packet's shape, its slot and its header words
    output wire                               tx_valid,
    output wire [SLOTS_LOG2-1:0]              tx_slot,
    output wire                               tx_ipv6,
    output wire [6:0]                         tx_hlen,
    output wire [1:0]                         tx_pad,
    output wire [12:0]                        tx_len,
    output wire [2:0]                         tx_align,
    input  wire                               tx_done,
    input  wire [SLOTS_LOG2+3:0]              hdr_addr,
    output wire [63:0]                        hdr_data,
    // status
    output reg                                refuse,
    output reg  [7:0]                         refuse_code,
    output reg  [31:0]                        refuse_psn,
    output wire [SLOTS_LOG2:0]                slots_free
);
    localparam integer SLOTS = 1 << SLOTS_LOG2;
    localparam integer REGIONS = 1 << REGION_BITS;

    // error codes (docs/firmware.md, "The data mover in Verilog")
    localparam [7:0] E_DESC_LENGTH = 8'h01;
    localparam [7:0] E_VERSION     = 8'h02;
    localparam [7:0] E_FLAGS       = 8'h03;
    localparam [7:0] E_HEADER_LEN  = 8'h04;
    localparam [7:0] E_PAD         = 8'h05;
    localparam [7:0] E_PAYLOAD_LEN = 8'h06;
    localparam [7:0] E_REGION      = 8'h07;
    localparam [7:0] E_RANGE       = 8'h08;
    localparam [7:0] E_RESERVED    = 8'h09;

    // header words of every slot: beat 4..15 of each descriptor (beats 0..3 are stored too,
    // which keeps the addressing a plain concatenation)
    reg [63:0] hdr_ram [0:(SLOTS*16)-1];
    assign hdr_data = hdr_ram[hdr_addr];

    // per-slot fields
    reg [ADDR_W-1:0] m_addr  [0:SLOTS-1];
    reg [12:0]       m_len   [0:SLOTS-1];
    reg [6:0]        m_hlen  [0:SLOTS-1];
    reg [1:0]        m_pad   [0:SLOTS-1];
    reg              m_ipv6  [0:SLOTS-1];

    reg [SLOTS_LOG2:0] wptr;   // next slot to fill
    reg [SLOTS_LOG2:0] rdptr;  // next slot the read engine takes
    reg [SLOTS_LOG2:0] txptr;  // next slot the transmitter takes

    wire [SLOTS_LOG2:0] used = wptr - txptr;
    assign slots_free = SLOTS[SLOTS_LOG2:0] - used;

    // the descriptor being received
    reg [3:0]  beat;
    reg        discard;         // a descriptor too long: drop beats up to its TLAST
    reg [7:0]  d_version;
    reg [7:0]  d_flags;
    reg [7:0]  d_hlen;
    reg [7:0]  d_pad;
    reg [31:0] d_len;
    reg [31:0] d_region;
    reg [31:0] d_psn;
    reg [63:0] d_offset;
    reg        d_reserved_set;

    assign s_tready = enable && (used != SLOTS[SLOTS_LOG2:0]);
    wire take = s_tvalid && s_tready;

    // the checks, read at the descriptor's last beat
    wire        ipv6 = d_flags[1];
    wire [7:0]  min_hlen = ipv6 ? 8'd60 : 8'd40;
    wire        bad_version = d_version != 8'd1;
    wire        bad_flags = !d_flags[0] || (d_flags[7:3] != 5'd0);
    wire        bad_hlen = (d_hlen[1:0] != 2'b00) || (d_hlen < min_hlen) || (d_hlen > 8'd92);
    wire [1:0]  len_plus_pad = d_len[1:0] + d_pad[1:0];
    wire        bad_pad = (d_pad > 8'd3) || (len_plus_pad != 2'b00);
    wire        bad_len = d_len > MAX_PAYLOAD;
    wire        region_exists = d_region < REGIONS;
    wire [REGION_BITS-1:0] region = d_region[REGION_BITS-1:0];
    wire [31:0] size = region_size[region*32 +: 32];
    wire [ADDR_W-1:0] base = region_base[region*ADDR_W +: ADDR_W];
    wire        bad_region = !region_exists || (size == 32'd0);
    wire [32:0] end_of_payload = {1'b0, d_offset[31:0]} + {1'b0, d_len};
    wire        bad_range = (d_offset[63:32] != 32'd0) || (end_of_payload > {1'b0, size});

    reg [7:0] verdict;
    always @(*) begin
        if (bad_version) verdict = E_VERSION;
        else if (bad_flags) verdict = E_FLAGS;
        else if (bad_hlen) verdict = E_HEADER_LEN;
        else if (bad_pad) verdict = E_PAD;
        else if (bad_len) verdict = E_PAYLOAD_LEN;
        else if (bad_region) verdict = E_REGION;
        else if (bad_range) verdict = E_RANGE;
        else if (d_reserved_set) verdict = E_RESERVED;
        else verdict = 8'h00;
    end

    // flags bit 2 (RETRANSMISSION) is the CPU's note to itself
    // verilator lint_off UNUSEDSIGNAL
    wire unused = &{1'b0, d_flags[2]};
    // verilator lint_on UNUSEDSIGNAL

    wire [SLOTS_LOG2-1:0] wslot = wptr[SLOTS_LOG2-1:0];
    wire last_beat = take && !discard && (beat == 4'd15);
    wire commit = last_beat && s_tlast && !s_tuser && (verdict == 8'h00);

    always @(posedge aclk) begin
        if (take && !discard) hdr_ram[{wslot, beat}] <= s_tdata;
        if (commit) begin
            m_addr[wslot] <= base + d_offset[ADDR_W-1:0];
            m_len[wslot] <= d_len[12:0];
            m_hlen[wslot] <= d_hlen[6:0];
            m_pad[wslot] <= d_pad[1:0];
            m_ipv6[wslot] <= ipv6;
        end
    end

    always @(posedge aclk) begin
        if (rst) begin
            wptr <= 0;
            rdptr <= 0;
            txptr <= 0;
            beat <= 4'd0;
            discard <= 1'b0;
            refuse <= 1'b0;
            refuse_code <= 8'h00;
            refuse_psn <= 32'd0;
            d_version <= 8'd0;
            d_flags <= 8'd0;
            d_hlen <= 8'd0;
            d_pad <= 8'd0;
            d_len <= 32'd0;
            d_region <= 32'd0;
            d_psn <= 32'd0;
            d_offset <= 64'd0;
            d_reserved_set <= 1'b0;
        end else begin
            refuse <= 1'b0;
            if (rd_pop) rdptr <= rdptr + 1'b1;
            if (tx_done) txptr <= txptr + 1'b1;
            if (commit) wptr <= wptr + 1'b1;
            if (take) begin
                if (discard) begin
                    if (s_tlast) discard <= 1'b0;
                end else begin
                    case (beat)
                        4'd0: begin
                            d_version <= s_tdata[7:0];
                            d_flags <= s_tdata[15:8];
                            d_hlen <= s_tdata[23:16];
                            d_pad <= s_tdata[31:24];
                            d_len <= s_tdata[63:32];
                        end
                        4'd1: begin
                            d_region <= s_tdata[31:0];
                            d_psn <= s_tdata[63:32];
                        end
                        4'd2: d_offset <= s_tdata;
                        4'd3: d_reserved_set <= s_tdata != 64'd0;
                        default: ;
                    endcase
                    if (s_tlast || beat == 4'd15) begin
                        beat <= 4'd0;
                        if (!s_tlast) discard <= 1'b1;
                        if (!s_tlast || beat != 4'd15 || verdict != 8'h00 || s_tuser) begin
                            refuse <= 1'b1;
                            refuse_code <= (beat == 4'd15 && s_tlast && !s_tuser) ? verdict
                                                                                  : E_DESC_LENGTH;
                            // a descriptor cut short before its PSN arrived reports 0
                            refuse_psn <= (beat >= 4'd2) ? d_psn : 32'd0;
                        end
                    end else begin
                        beat <= beat + 4'd1;
                    end
                end
            end
        end
    end

    wire [SLOTS_LOG2-1:0] rslot = rdptr[SLOTS_LOG2-1:0];
    wire [SLOTS_LOG2-1:0] tslot = txptr[SLOTS_LOG2-1:0];
    assign rd_valid = rdptr != wptr;
    assign rd_addr = m_addr[rslot];
    assign rd_len = m_len[rslot];
    assign tx_valid = txptr != wptr;
    assign tx_slot = tslot;
    assign tx_ipv6 = m_ipv6[tslot];
    assign tx_hlen = m_hlen[tslot];
    assign tx_pad = m_pad[tslot];
    assign tx_len = m_len[tslot];
    assign tx_align = m_addr[tslot][2:0];
endmodule

`default_nettype wire
