// The transmitter: turns each accepted descriptor into one Ethernet frame on an AXI-Stream,
// 64 bits a clock:
//
//   destination MAC, source MAC, EtherType ‖ headers[0..H] ‖ payload ‖ pad ‖ ICRC
//
// Two stages and a register between them (it splits the payload rotator from the CRC tree,
// so neither path is deeper than a few LUTs). The emitter builds the IP packet as 64-bit words aligned to the IP header (the
// "W stream"): header words from the descriptor's slot, then the payload, shifted from its
// byte offset in memory into place by one byte rotator whose shift is fixed per packet, then
// the pad as zero bytes. The framer puts the 14-byte Ethernet header in front (a constant
// six-byte lag against the W stream), runs the ICRC over the W words as they pass, eight
// bytes a clock, with the contract's masks applied to the CRC input only, and appends the
// ICRC least significant byte first. For a packet whose length is 4 mod 8 the CRC input runs
// four bytes behind the W stream (the first four of the eight 0xFF bytes folded into its start
// value), so that its last step is a whole word too and one 64-bit CRC step serves all. A payload word the memory answered with an error (RRESP SLVERR or
// DECERR) sends the packet with its ICRC inverted, so no receiver accepts it.
//
// Reset: rst high drops the packet in progress (synchronous). One clock domain.
`default_nettype none

module mover_tx #(
    parameter integer SLOTS_LOG2 = 2
) (
    input  wire                    aclk,
    input  wire                    rst,
    input  wire [47:0]             mac_dst,      // bits 47:40 go first on the wire
    input  wire [47:0]             mac_src,
    // the next descriptor
    input  wire                    tx_valid,
    input  wire [SLOTS_LOG2-1:0]   tx_slot,
    input  wire                    tx_ipv6,
    input  wire [6:0]              tx_hlen,
    input  wire [1:0]              tx_pad,
    input  wire [12:0]             tx_len,
    input  wire [2:0]              tx_align,
    output wire                    tx_done,
    output wire [SLOTS_LOG2+3:0]   hdr_addr,
    input  wire [63:0]             hdr_data,
    // payload words, {read error, data}
    input  wire [64:0]             fifo_dout,
    input  wire                    fifo_valid,
    output wire                    fifo_pop,
    // frames to the MAC
    output reg  [63:0]             m_axis_tdata,
    output reg  [7:0]              m_axis_tkeep,
    output reg                     m_axis_tlast,
    output reg                     m_axis_tvalid,
    input  wire                    m_axis_tready,
    // one-clock pulses
    output reg                     sent,
    output reg                     sent_read_error,
    output wire                    busy
);
    // ---------------------------------------------------------------- emitter
    reg                   e_active;
    reg [SLOTS_LOG2-1:0]  e_slot;
    reg                   e_ipv6;
    reg [12:0]            e_h_left;   // header bytes from W word e_k on
    reg [12:0]            e_hl_left;  // header and payload bytes from W word e_k on
    reg [9:0]             e_last_k;   // index of the packet's last W word
    reg                   e_half;     // the packet's length is 4 mod 8
    reg [3:0]             e_hw;       // W words that hold header bytes only
    reg [2:0]             e_shift;    // byte rotation from memory words to W words
    reg [10:0]            e_n;        // memory words of the payload
    reg [10:0]            e_p;        // memory words taken so far
    reg                   e_primed;   // the word before the first payload W word is in e_prev
    reg [9:0]             e_k;        // W word index
    reg [63:0]            e_prev;
    reg                   e_err;

    // per-packet parameters, from the descriptor at its head
    wire [12:0] l_t = {6'd0, tx_hlen} + tx_len + {11'd0, tx_pad};
    wire [12:0] l_t_words = l_t + 13'd7;
    wire        l_hrem4 = tx_hlen[2];
    // the payload's first byte sits at lane hrem of the first payload W word and at lane
    // `align` of its memory word: rotate by align - hrem; when align < hrem the word before
    // the first memory word is empty (nothing to take first)
    wire        l_before = l_hrem4 && !tx_align[2];
    wire [2:0]  l_shift = tx_align - {l_hrem4, 2'b00};
    wire [13:0] l_span = {11'd0, tx_align} + {1'b0, tx_len} + 14'd7;
    wire [10:0] l_n = (tx_len == 13'd0) ? 11'd0 : l_span[13:3];

    // verilator lint_off UNUSEDSIGNAL
    wire unused = &{1'b0, l_t_words[2:0], l_span[2:0]};
    // verilator lint_on UNUSEDSIGNAL

    wire        w_ready;
    wire        in_payload = e_k >= {6'd0, e_hw};
    wire        take_word = in_payload && (e_p < e_n);
    wire        w_valid = e_active && (!in_payload || (e_primed && (!take_word || fifo_valid)));
    wire        w_fire = w_valid && w_ready;
    wire        w_last = e_k == e_last_k;
    wire        prime = e_active && !e_primed && fifo_valid;

    assign fifo_pop = prime || (w_fire && take_word);
    assign tx_done = w_fire && w_last;
    wire [3:0] hdr_word = e_k[3:0] + 4'd4;
    assign hdr_addr = {e_slot, hdr_word};

    wire [63:0]  cur = take_word ? fifo_dout[63:0] : 64'd0;
    wire [127:0] pair = {cur, e_prev};
    wire [127:0] rotated = pair >> {e_shift, 3'b000};
    wire         word_err = take_word && fifo_dout[64];

    // each lane: header byte, payload byte or zero (pad, and past the end), by how many
    // header and payload bytes are left from this word on (at most 8 of each matter)
    wire [3:0] h_here = (e_h_left >= 13'd8) ? 4'd8 : e_h_left[3:0];
    wire [3:0] hl_here = (e_hl_left >= 13'd8) ? 4'd8 : e_hl_left[3:0];
    reg [63:0] w_data;
    integer lane;
    always @(*) begin
        for (lane = 0; lane < 8; lane = lane + 1) begin
            if (lane[3:0] < h_here)
                w_data[lane*8 +: 8] = hdr_data[lane*8 +: 8];
            else if (lane[3:0] < hl_here)
                w_data[lane*8 +: 8] = rotated[lane*8 +: 8];
            else
                w_data[lane*8 +: 8] = 8'd0;
        end
    end

    always @(posedge aclk) begin
        if (rst) begin
            e_active <= 1'b0;
            e_slot <= {SLOTS_LOG2{1'b0}};
            e_ipv6 <= 1'b0;
            e_h_left <= 13'd0;
            e_hl_left <= 13'd0;
            e_last_k <= 10'd0;
            e_half <= 1'b0;
            e_hw <= 4'd0;
            e_shift <= 3'd0;
            e_n <= 11'd0;
            e_p <= 11'd0;
            e_primed <= 1'b0;
            e_k <= 10'd0;
            e_prev <= 64'd0;
            e_err <= 1'b0;
        end else if (!e_active) begin
            if (tx_valid) begin
                e_active <= 1'b1;
                e_slot <= tx_slot;
                e_ipv6 <= tx_ipv6;
                e_h_left <= {6'd0, tx_hlen};
                e_hl_left <= {6'd0, tx_hlen} + tx_len;
                e_last_k <= l_t_words[12:3] - 10'd1;
                e_half <= l_t[2];
                e_hw <= tx_hlen[6:3];
                e_shift <= l_shift;
                e_n <= l_n;
                e_p <= 11'd0;
                e_primed <= l_before || (l_n == 11'd0);
                e_k <= 10'd0;
                e_prev <= 64'd0;
                e_err <= 1'b0;
            end
        end else begin
            if (prime) begin
                e_prev <= fifo_dout[63:0];
                e_p <= 11'd1;
                e_primed <= 1'b1;
                e_err <= fifo_dout[64];
            end
            if (w_fire) begin
                e_k <= e_k + 10'd1;
                e_h_left <= (e_h_left >= 13'd8) ? e_h_left - 13'd8 : 13'd0;
                e_hl_left <= (e_hl_left >= 13'd8) ? e_hl_left - 13'd8 : 13'd0;
                if (in_payload) e_prev <= cur;
                if (take_word) e_p <= e_p + 11'd1;
                if (word_err) e_err <= 1'b1;
                if (w_last) e_active <= 1'b0;
            end
        end
    end

    // ---------------------------------------------------------------- W register
    // a full-rate pipeline register: W words and what the framer needs to know about them
    reg        p_valid;
    reg [63:0] p_data;
    reg        p_last;
    reg        p_half;
    reg        p_ipv6;
    reg        p_err;
    wire       p_take;
    assign w_ready = !p_valid || p_take;

    always @(posedge aclk) begin
        if (rst) begin
            p_valid <= 1'b0;
            p_data <= 64'd0;
            p_last <= 1'b0;
            p_half <= 1'b0;
            p_ipv6 <= 1'b0;
            p_err <= 1'b0;
        end else if (w_ready) begin
            p_valid <= w_valid;
            if (w_valid) begin
                p_data <= w_data;
                p_last <= w_last;
                p_half <= e_half;
                p_ipv6 <= e_ipv6;
                p_err <= e_err || word_err;
            end
        end
    end

    // ---------------------------------------------------------------- framer
    localparam [2:0] O_IDLE = 3'd0;  // next: the Ethernet header's first word
    localparam [2:0] O_ETH1 = 3'd1;  // next: Ethernet header's rest and W word 0
    localparam [2:0] O_DATA = 3'd2;  // next: a W word
    localparam [2:0] O_TAIL_A = 3'd3; // last W word was full: its 6 bytes and ICRC[0..2]
    localparam [2:0] O_TAIL_B = 3'd4; // then ICRC[2..4]
    localparam [2:0] O_TAIL_H = 3'd5; // last W word held 4 bytes: 2 of them and the ICRC


    reg [2:0]  o_state;
    reg [47:0] o_hold;   // bytes 2..7 of the last W word
    reg [31:0] o_crc;
    reg [31:0] o_high;   // the CRC input's last word's high half (masked)
    reg [2:0]  o_widx;   // W word index, stops at 7 (the masks end at word 6)
    reg        o_err;

    wire can_load = !m_axis_tvalid || m_axis_tready;
    assign busy = e_active || p_valid || (o_state != O_IDLE) || m_axis_tvalid;
    assign p_take = p_valid && can_load && (o_state == O_ETH1 || o_state == O_DATA);

    // Reflected CRC-32 (polynomial 0x04C11DB7), bytes in lane order, each byte LSB first, one
    // bit at a time: the definition, evaluated only while elaborating.
    function automatic [31:0] crc_serial(input [31:0] c, input [63:0] d, input integer bits);
        integer i;
        reg [31:0] x;
        begin
            x = c;
            for (i = 0; i < 64; i = i + 1)
                if (i < bits) x = (x >> 1) ^ ((x[0] ^ d[i]) ? 32'hEDB88320 : 32'h0);
            crc_serial = x;
        end
    endfunction

    // The CRC step is linear in {crc, data}: column i (data bits 0-63, then crc bits 0-31) is
    // what input bit i alone does to the next CRC. Each next-CRC bit is then the XOR of the
    // input bits its row selects, which synthesis builds as a balanced tree (3 LUT levels)
    // rather than the 64-deep chain of the definition.
    function automatic [96*32-1:0] crc_columns(input integer bits);
        integer i;
        reg [96*32-1:0] m;
        begin
            for (i = 0; i < 96; i = i + 1)
                m[i*32 +: 32] = (i < 64) ? crc_serial(32'd0, 64'd1 << i, bits)
                                         : crc_serial(32'd1 << (i - 64), 64'd0, bits);
            crc_columns = m;
        end
    endfunction
    localparam [96*32-1:0] CRC64 = crc_columns(64);
    // the CRC register after the eight 0xFF bytes that stand for the LRH (from 0xFFFFFFFF),
    // and after the first four of them
    localparam [31:0] CRC_AFTER_LRH = crc_serial(32'hFFFFFFFF, {64{1'b1}}, 64);
    localparam [31:0] CRC_AFTER_4FF = crc_serial(32'hFFFFFFFF, {64{1'b1}}, 32);

    // The ICRC's input masks (all-ones) in W word `idx`: IPv4 TOS, TTL, checksum; UDP
    // checksum; BTH byte 4. IPv6 traffic class, flow label, hop limit; UDP checksum; BTH byte 4.
    function automatic [63:0] icrc_mask(input [2:0] idx, input v6);
        begin
            case ({v6, idx})
                4'b0_000: icrc_mask = 64'h0000_0000_0000_FF00;
                4'b0_001: icrc_mask = 64'h0000_0000_FFFF_00FF;
                4'b0_011: icrc_mask = 64'h0000_0000_FFFF_0000;
                4'b0_100: icrc_mask = 64'h0000_0000_0000_00FF;
                4'b1_000: icrc_mask = 64'hFF00_0000_FFFF_FF0F;
                4'b1_101: icrc_mask = 64'hFFFF_0000_0000_0000;
                4'b1_110: icrc_mask = 64'h0000_00FF_0000_0000;
                default:  icrc_mask = 64'h0;
            endcase
        end
    endfunction

    wire [2:0]  widx = (o_state == O_ETH1) ? 3'd0 : o_widx;
    wire [63:0] masked = p_data | icrc_mask(widx, p_ipv6);
    wire        first = o_state == O_ETH1;
    // four bytes behind: this word's low half after the previous word's high half (0xFF x 4
    // before the first)
    wire [31:0] behind = first ? 32'hFFFFFFFF : o_high;
    wire [63:0] crc_in = p_half ? {masked[31:0], behind} : masked;
    wire [31:0] crc_from = !first ? o_crc : p_half ? CRC_AFTER_4FF : CRC_AFTER_LRH;
    wire [95:0] crc_bits = {crc_from, crc_in};
    wire [31:0] crc_next;
    genvar row, col;
    generate
        for (row = 0; row < 32; row = row + 1) begin : crc_row
            wire [95:0] sel;
            for (col = 0; col < 96; col = col + 1) begin : crc_col
                assign sel[col] = CRC64[col*32 + row];
            end
            assign crc_next[row] = ^(crc_bits & sel);
        end
    endgenerate
    // on the wire: the complement, least significant byte first; inverted on a read error
    wire [31:0] icrc = o_err ? o_crc : ~o_crc;

    wire [15:0] ethertype = p_ipv6 ? 16'h86DD : 16'h0800;
    wire [63:0] eth0 = {mac_src[39:32], mac_src[47:40], mac_dst[7:0], mac_dst[15:8],
                        mac_dst[23:16], mac_dst[31:24], mac_dst[39:32], mac_dst[47:40]};
    wire [47:0] eth1 = {ethertype[7:0], ethertype[15:8], mac_src[7:0], mac_src[15:8],
                        mac_src[23:16], mac_src[31:24]};

    always @(posedge aclk) begin
        if (rst) begin
            o_state <= O_IDLE;
            o_hold <= 48'd0;
            o_crc <= 32'd0;
            o_high <= 32'd0;
            o_widx <= 3'd0;
            o_err <= 1'b0;
            m_axis_tdata <= 64'd0;
            m_axis_tkeep <= 8'd0;
            m_axis_tlast <= 1'b0;
            m_axis_tvalid <= 1'b0;
            sent <= 1'b0;
            sent_read_error <= 1'b0;
        end else begin
            sent <= 1'b0;
            sent_read_error <= 1'b0;
            if (m_axis_tready) m_axis_tvalid <= 1'b0;
            if (can_load) begin
                case (o_state)
                    O_IDLE: if (p_valid) begin
                        m_axis_tdata <= eth0;
                        m_axis_tkeep <= 8'hFF;
                        m_axis_tlast <= 1'b0;
                        m_axis_tvalid <= 1'b1;
                        o_state <= O_ETH1;
                    end
                    O_ETH1, O_DATA: if (p_take) begin
                        m_axis_tdata <= (o_state == O_ETH1) ? {p_data[15:0], eth1}
                                                            : {p_data[15:0], o_hold};
                        m_axis_tkeep <= 8'hFF;
                        m_axis_tlast <= 1'b0;
                        m_axis_tvalid <= 1'b1;
                        o_hold <= p_data[63:16];
                        o_crc <= crc_next;
                        o_high <= masked[63:32];
                        o_widx <= (o_state == O_ETH1) ? 3'd1
                                  : (o_widx == 3'd7) ? 3'd7 : o_widx + 3'd1;
                        o_err <= ((o_state == O_ETH1) ? 1'b0 : o_err) || p_err;
                        if (p_last) o_state <= p_half ? O_TAIL_H : O_TAIL_A;
                        else o_state <= O_DATA;
                    end
                    O_TAIL_A: begin
                        m_axis_tdata <= {icrc[15:0], o_hold};
                        m_axis_tkeep <= 8'hFF;
                        m_axis_tlast <= 1'b0;
                        m_axis_tvalid <= 1'b1;
                        o_state <= O_TAIL_B;
                    end
                    O_TAIL_B, O_TAIL_H: begin
                        // the frame's last beat: ICRC[2..4], or the last 2 W bytes and the ICRC
                        m_axis_tdata <= (o_state == O_TAIL_B) ? {48'd0, icrc[31:16]}
                                                              : {16'd0, icrc, o_hold[15:0]};
                        m_axis_tkeep <= (o_state == O_TAIL_B) ? 8'h03 : 8'h3F;
                        m_axis_tlast <= 1'b1;
                        m_axis_tvalid <= 1'b1;
                        sent <= 1'b1;
                        sent_read_error <= o_err;
                        o_state <= O_IDLE;
                    end
                    default: o_state <= O_IDLE;
                endcase
            end
        end
    end
endmodule

`default_nettype wire
