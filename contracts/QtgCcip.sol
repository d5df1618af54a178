// SPDX-License-Identifier: Apache-2.0
// The two small contracts qtg's CCIP tests and demo add to Chainlink's own CCIP 1.6 lane (whose
// released bytecode comes from the npm package @chainlink/contracts-ccip, fetched by
// scripts/ensure-evm-tools.sh): the wrapped native coin the Router takes native fees in (WETH9's
// interface), and a message receiver that can be told to revert (a FAILURE on the destination).
// Compiled with solc 0.8.28 (npm `solc`, pinned in scripts/ensure-evm-tools.sh):
//   solcjs --bin --optimize -o OUT QtgCcip.sol
// QtgCcip_sol_QtgWrappedNative.bin and QtgCcip_sol_QtgCcipReceiver.bin are the committed
// bytecode, checked against a fresh compile by the CCIP tests.
pragma solidity 0.8.28;

/// WETH9's interface: deposit() wraps msg.value, withdraw() unwraps, ERC-20 for the rest.
contract QtgWrappedNative {
    string public constant name = "Wrapped Ether";
    string public constant symbol = "WETH";
    uint8 public constant decimals = 18;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Approval(address indexed src, address indexed guy, uint256 wad);
    event Transfer(address indexed src, address indexed dst, uint256 wad);
    event Deposit(address indexed dst, uint256 wad);
    event Withdrawal(address indexed src, uint256 wad);

    receive() external payable {
        deposit();
    }

    function deposit() public payable {
        balanceOf[msg.sender] += msg.value;
        emit Deposit(msg.sender, msg.value);
    }

    function withdraw(uint256 wad) external {
        require(balanceOf[msg.sender] >= wad, "balance");
        balanceOf[msg.sender] -= wad;
        emit Withdrawal(msg.sender, wad);
        (bool ok,) = msg.sender.call{value: wad}("");
        require(ok, "send");
    }

    function totalSupply() external view returns (uint256) {
        return address(this).balance;
    }

    function approve(address guy, uint256 wad) external returns (bool) {
        allowance[msg.sender][guy] = wad;
        emit Approval(msg.sender, guy, wad);
        return true;
    }

    function transfer(address dst, uint256 wad) external returns (bool) {
        return transferFrom(msg.sender, dst, wad);
    }

    function transferFrom(address src, address dst, uint256 wad) public returns (bool) {
        require(balanceOf[src] >= wad, "balance");
        if (src != msg.sender && allowance[src][msg.sender] != type(uint256).max) {
            require(allowance[src][msg.sender] >= wad, "allowance");
            allowance[src][msg.sender] -= wad;
        }
        balanceOf[src] -= wad;
        balanceOf[dst] += wad;
        emit Transfer(src, dst, wad);
        return true;
    }
}

/// A CCIP message receiver (IAny2EVMMessageReceiver through ERC-165, as CCIPReceiver): only the
/// router may deliver; it counts what it received and reverts while `failing` is set — the
/// destination's execution is then a FAILURE, which manual execution may later turn into SUCCESS.
contract QtgCcipReceiver {
    struct EVMTokenAmount {
        address token;
        uint256 amount;
    }

    struct Any2EVMMessage {
        bytes32 messageId;
        uint64 sourceChainSelector;
        bytes sender;
        bytes data;
        EVMTokenAmount[] destTokenAmounts;
    }

    address public immutable router;
    address public immutable owner;
    bool public failing;
    uint256 public received;
    bytes32 public lastMessageId;

    event Received(bytes32 indexed messageId, uint64 sourceChainSelector, bytes data);

    constructor(address router_, bool failing_) {
        router = router_;
        owner = msg.sender;
        failing = failing_;
    }

    function setFailing(bool failing_) external {
        require(msg.sender == owner, "owner");
        failing = failing_;
    }

    function supportsInterface(bytes4 interfaceId) external pure returns (bool) {
        // IAny2EVMMessageReceiver (ccipReceive's selector) and IERC165.
        return interfaceId == this.ccipReceive.selector || interfaceId == 0x01ffc9a7;
    }

    function ccipReceive(Any2EVMMessage calldata message) external {
        require(msg.sender == router, "router");
        require(!failing, "QtgCcipReceiver: failing");
        received += 1;
        lastMessageId = message.messageId;
        emit Received(message.messageId, message.sourceChainSelector, message.data);
    }
}
